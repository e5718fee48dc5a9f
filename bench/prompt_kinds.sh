# The prompt kinds the speculation benchmarks measure acceptance on (sourced
# by bench/speculation.sh and bench/layer_skip.sh): chat, code, summarising
# a given passage, and repeating it word for word.
passage="The lighthouse stood at the end of the harbour wall. Every night the keeper climbed its hundred and twelve \
steps, trimmed the wick, wound the clockwork that turned the lens, and wrote the weather in a leather book. In \
the winter of the great storm the lens stopped turning, and for three nights he turned it by hand."
declare -A prompts=(
  [chat]="Give me three tips for staying healthy."
  [code]="Write a Python function that checks whether a number is prime, with a docstring and tests."
  [summarise]="Summarise this text in two sentences:

$passage"
  [repeat]="Repeat this text word for word:

$passage"
)
