"""A GGUF file with the tensor directory of a `make-model` Llama 3 preset
(128-wide heads) and no weights (a sparse file of the full size), so
`ntransformer plan` can plan a model too large to write here. Its weights read as zeros: pass --cpu-gbps and
--disk-gbps, since measuring on it would measure zero pages.

    python bench/header_only_model.py build/src/ntransformer llama3-70b q4_k_m /tmp/70b-header.gguf
"""

import os
import re
import subprocess
import sys

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter


def main(ntransformer, preset, qtype, out):
    listing = subprocess.run([ntransformer, "make-model", "--preset", preset, "--type", qtype, "--out", out, "--dry-run"],
                             check=True, capture_output=True, text=True).stdout
    tensors = re.findall(r"^(\S+)\s+(\S+)\s+(\d+(?: x \d+)?)\s+(\d+)$", listing, re.M)
    # The config keys read_model_spec needs, from the preset's tensor shapes.
    shape = {name: [int(d) for d in dims.split(" x ")] for name, _, dims, _ in tensors}
    dim, vocab = shape["token_embd.weight"]
    n_layers = 1 + max(int(m[1]) for n in shape if (m := re.match(r"blk\.(\d+)\.", n)))
    heads = dim // 128
    kv_heads = shape["blk.0.attn_k.weight"][1] // 128
    w = GGUFWriter(out, arch="llama")
    w.add_context_length(8192)
    w.add_embedding_length(dim)
    w.add_block_count(n_layers)
    w.add_feed_forward_length(shape["blk.0.ffn_gate.weight"][1])
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(128)
    w.add_rope_freq_base(500000.0)
    w.add_vocab_size(vocab)
    for name, type_name, dims, nbytes in tensors:
        w.add_tensor_info(name, [int(d) for d in reversed(dims.split(" x "))], np.dtype(np.float32), int(nbytes),
                          raw_dtype=GGMLQuantizationType[type_name])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    header = os.path.getsize(out)
    align = 32
    data = sum((int(n) + align - 1) // align * align for *_, n in tensors)
    os.truncate(out, (header + align - 1) // align * align + data)


if __name__ == "__main__":
    main(*sys.argv[1:])
