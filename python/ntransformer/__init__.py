"""ntransformer: GGUF models from Python, over the C API (libntransformer.so) by ctypes.

    import ntransformer
    with ntransformer.Model("model.gguf") as model:
        model.generate("Once upon a time", max_tokens=32, temperature=0)
        model.chat([{"role": "user", "content": "Hi!"}])
        for piece in model.generate("Once upon a time", stream=True): ...

Model runs whole generations through the engine's requests (continuous
batching on a thread of the library's own); Context, Batch and Sampler are
the token-level API (nt_decode, nt_get_logits, the sampling chain).
Every failure raises NtError with the library's status and message.
"""

from __future__ import annotations

import ctypes
import json
import os
from pathlib import Path
from typing import Iterable, Iterator, List, Optional, Sequence, Union

__all__ = ["NtError", "Model", "Context", "Batch", "Sampler", "library_path", "version", "STATUS_NAMES"]

API_VERSION = 1

STATUS_NAMES = {
    0: "ok", 1: "invalid argument", 2: "out of range", 3: "buffer too small", 4: "invalid state",
    5: "not found", 6: "unsupported", 7: "no memory", 8: "aborted", 9: "engine error", 10: "internal error",
}
_BUFFER_TOO_SMALL = 3
_STOP_REASONS = {0: None, 1: "token limit", 2: "end of text", 3: "stop string", 4: "context full", 5: "cancelled",
                 6: "error"}
_DEVICES = {"auto": 0, "cpu": 1, "cuda": 2}
_KV_TYPES = {"f16": 0, "f32": 1}


class NtError(RuntimeError):
    """A call the library refused: `status` (an nt_status value), `message` (nt_last_error)."""

    def __init__(self, status: int, message: str):
        super().__init__(f"{message} ({STATUS_NAMES.get(status, status)})")
        self.status = status
        self.message = message


# ---- The library ---------------------------------------------------------------------------------------

def _candidates() -> Iterable[Path]:
    here = Path(__file__).resolve().parent
    yield from sorted(here.glob("libntransformer.so*"))
    # A checkout: python/ntransformer/ beside build*/ trees.
    for build in sorted(here.parent.parent.glob("build*")):
        yield from sorted((build / "src" / "capi").glob("libntransformer.so*"))


def library_path() -> str:
    """The libntransformer.so this package loads (see the module's README for the order)."""
    explicit = os.environ.get("NT_LIBRARY")
    if explicit:
        return explicit
    for path in _candidates():
        if path.is_file():
            return str(path)
    import ctypes.util
    found = ctypes.util.find_library("ntransformer")
    if found:
        return found
    raise OSError("libntransformer.so not found: set NT_LIBRARY, or install the library (cmake --install)")


class _ModelParams(ctypes.Structure):
    _fields_ = [("path", ctypes.c_char_p), ("device", ctypes.c_int), ("vram_budget", ctypes.c_uint64),
                ("ram_budget", ctypes.c_uint64), ("progress_callback", ctypes.c_void_p),
                ("progress_user_data", ctypes.c_void_p), ("abort_callback", ctypes.c_void_p),
                ("abort_user_data", ctypes.c_void_p)]


class _ContextParams(ctypes.Structure):
    _fields_ = [("n_ctx", ctypes.c_uint32), ("n_seq_max", ctypes.c_uint32), ("n_batch", ctypes.c_uint32),
                ("kv_type", ctypes.c_int), ("n_threads", ctypes.c_int32)]


_TextCallback = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_uint64, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_void_p)
_ProgressCallback = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_float, ctypes.c_void_p)
_AbortCallback = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p)


class _RequestParams(ctypes.Structure):
    _fields_ = [("max_tokens", ctypes.c_int32), ("temperature", ctypes.c_float), ("top_k", ctypes.c_int32),
                ("top_p", ctypes.c_float), ("min_p", ctypes.c_float), ("repeat_penalty", ctypes.c_float),
                ("repeat_last_n", ctypes.c_int32), ("frequency_penalty", ctypes.c_float),
                ("presence_penalty", ctypes.c_float), ("seed", ctypes.c_uint64), ("ignore_eos", ctypes.c_bool),
                ("stop", ctypes.POINTER(ctypes.c_char_p)), ("n_stop", ctypes.c_size_t),
                ("on_text", ctypes.c_void_p), ("user_data", ctypes.c_void_p)]


class _RequestStatus(ctypes.Structure):
    _fields_ = [("state", ctypes.c_int), ("stop", ctypes.c_int), ("prompt_tokens", ctypes.c_int32),
                ("completion_tokens", ctypes.c_int32)]


class _Counters(ctypes.Structure):
    _fields_ = [("weight_bytes_per_token", ctypes.c_uint64), ("kv_bytes_per_position", ctypes.c_uint64),
                ("passes", ctypes.c_int64), ("tokens", ctypes.c_int64), ("prompt_tokens", ctypes.c_int64),
                ("generated_tokens", ctypes.c_int64), ("seconds", ctypes.c_double)]


class _ChatMessage(ctypes.Structure):
    _fields_ = [("role", ctypes.c_char_p), ("content", ctypes.c_char_p)]


_lib = None


def _library():
    """Loads the library once and declares every function's types."""
    global _lib
    if _lib is not None:
        return _lib
    lib = ctypes.CDLL(library_path())
    P, I32, U32, U64, SZ = ctypes.c_void_p, ctypes.c_int32, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_size_t
    B, F, S = ctypes.c_bool, ctypes.c_float, ctypes.c_char_p
    PI32, PU32, PSZ = ctypes.POINTER(I32), ctypes.POINTER(U32), ctypes.POINTER(SZ)
    status = ctypes.c_int
    signatures = {
        "nt_last_error": (S, []), "nt_status_name": (S, [status]), "nt_version": (S, []), "nt_api_version": (I32, []),
        "nt_model_default_params": (_ModelParams, []),
        "nt_model_load": (status, [ctypes.POINTER(_ModelParams), ctypes.POINTER(P)]),
        "nt_model_free": (status, [P]),
        "nt_vocab_size": (status, [P, PI32]), "nt_model_n_layers": (status, [P, PI32]),
        "nt_model_n_embd": (status, [P, PI32]), "nt_model_n_ctx_train": (status, [P, PI32]),
        "nt_token_bos": (status, [P, PI32]), "nt_token_eos": (status, [P, PI32]),
        "nt_token_is_eog": (status, [P, I32, ctypes.POINTER(B)]),
        "nt_tokenize": (status, [P, S, I32, PI32, I32, B, B, PI32]),
        "nt_token_to_piece": (status, [P, I32, B, ctypes.c_char_p, I32, PI32]),
        "nt_chat_apply_template": (status, [P, S, ctypes.POINTER(_ChatMessage), SZ, B, ctypes.c_char_p, I32, PI32]),
        "nt_context_default_params": (_ContextParams, []),
        "nt_model_plan": (status, [P, ctypes.POINTER(_ContextParams), ctypes.c_char_p, I32, PI32]),
        "nt_context_new": (status, [P, ctypes.POINTER(_ContextParams), ctypes.POINTER(P)]),
        "nt_context_free": (status, [P]), "nt_n_ctx": (status, [P, PU32]), "nt_n_seq_max": (status, [P, PU32]),
        "nt_batch_init": (status, [I32, ctypes.POINTER(P)]), "nt_batch_free": (status, [P]),
        "nt_batch_clear": (status, [P]), "nt_batch_add": (status, [P, I32, I32, I32, B]),
        "nt_batch_size": (status, [P, PI32]),
        "nt_decode": (status, [P, P]), "nt_get_logits": (status, [P, I32, ctypes.POINTER(ctypes.POINTER(F))]),
        "nt_seq_length": (status, [P, I32, PI32]), "nt_seq_rm": (status, [P, I32, I32, I32]),
        "nt_seq_pos_min": (status, [P, I32, PI32]),
        "nt_seq_cp": (status, [P, I32, I32, I32, I32]), "nt_seq_keep": (status, [P, I32]),
        "nt_memory_clear": (status, [P]),
        "nt_seq_state_save": (status, [P, I32, ctypes.c_char_p, SZ, PSZ]),
        "nt_seq_state_load": (status, [P, I32, ctypes.c_char_p, SZ]),
        "nt_seq_state_save_file": (status, [P, I32, S]), "nt_seq_state_load_file": (status, [P, I32, S]),
        "nt_sampler_chain_new": (status, [ctypes.POINTER(P)]),
        "nt_sampler_chain_add_penalties": (status, [P, I32, F, F, F]),
        "nt_sampler_chain_add_top_k": (status, [P, I32]), "nt_sampler_chain_add_top_p": (status, [P, F]),
        "nt_sampler_chain_add_min_p": (status, [P, F]), "nt_sampler_chain_add_temp": (status, [P, F]),
        "nt_sampler_chain_add_dist": (status, [P, U64]), "nt_sampler_chain_add_greedy": (status, [P]),
        "nt_sampler_sample": (status, [P, P, I32, PI32]), "nt_sampler_accept": (status, [P, I32]),
        "nt_sampler_reset": (status, [P]), "nt_sampler_free": (status, [P]),
        "nt_request_default_params": (_RequestParams, []),
        "nt_request_submit": (status, [P, S, S, ctypes.POINTER(_RequestParams), ctypes.POINTER(U64)]),
        "nt_request_poll": (status, [P, U64, I32, ctypes.c_char_p, SZ, PSZ, ctypes.POINTER(_RequestStatus)]),
        "nt_request_cancel": (status, [P, U64]),
        "nt_context_get_counters": (status, [P, ctypes.POINTER(_Counters)]),
        "nt_context_reset_counters": (status, [P]),
        "nt_context_description": (status, [P, ctypes.c_char_p, I32, PI32]),
    }
    for name, (restype, argtypes) in signatures.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    if lib.nt_api_version() != API_VERSION:
        raise OSError(f"{library_path()} has C API version {lib.nt_api_version()}, this package speaks {API_VERSION}")
    _lib = lib
    return lib


def _check(status: int, allow=()) -> int:
    if status != 0 and status not in allow:
        raise NtError(status, _library().nt_last_error().decode("utf-8", "replace"))
    return status


def _sized_text(call) -> str:
    """Calls call(buf, size, n) twice when the first buffer is too small (nt_chat_apply_template's sizes)."""
    n = ctypes.c_int32(0)
    buf = ctypes.create_string_buffer(4096)
    if _check(call(buf, len(buf), ctypes.byref(n)), allow=(_BUFFER_TOO_SMALL,)) == _BUFFER_TOO_SMALL:
        buf = ctypes.create_string_buffer(-n.value)
        _check(call(buf, len(buf), ctypes.byref(n)))
    return buf.raw[:n.value].decode("utf-8", "replace")


def version() -> str:
    """The library's version: "0.1.0 (API 1)"."""
    return _library().nt_version().decode()


# ---- Token level ------------------------------------------------------------------------------------------

class Batch:
    """Entries for one Context.decode: add(token, pos, seq, logits)."""

    def __init__(self, capacity: int = 512):
        self._lib = _library()
        self._handle = ctypes.c_void_p()
        _check(self._lib.nt_batch_init(capacity, ctypes.byref(self._handle)))

    def add(self, token: int, pos: int, seq: int = 0, logits: bool = False) -> "Batch":
        _check(self._lib.nt_batch_add(self._handle, token, pos, seq, logits))
        return self

    def clear(self) -> "Batch":
        _check(self._lib.nt_batch_clear(self._handle))
        return self

    def __len__(self) -> int:
        n = ctypes.c_int32()
        _check(self._lib.nt_batch_size(self._handle, ctypes.byref(n)))
        return n.value

    def close(self):
        if getattr(self, "_handle", None):
            self._lib.nt_batch_free(self._handle)
            self._handle = ctypes.c_void_p()

    __del__ = close


class Sampler:
    """A sampling chain in the engine's order: penalties, top_k, top_p, min_p, temp, then dist or greedy."""

    def __init__(self, *, greedy: bool = False, temperature: float = 0.8, top_k: int = 40, top_p: float = 0.95,
                 min_p: float = 0.05, repeat_penalty: float = 1.0, repeat_last_n: int = 64,
                 frequency_penalty: float = 0.0, presence_penalty: float = 0.0, seed: int = 0):
        self._lib = _library()
        self._handle = ctypes.c_void_p()
        _check(self._lib.nt_sampler_chain_new(ctypes.byref(self._handle)))
        h = self._handle
        if repeat_penalty != 1.0 or frequency_penalty or presence_penalty:
            _check(self._lib.nt_sampler_chain_add_penalties(h, repeat_last_n, repeat_penalty, frequency_penalty,
                                                            presence_penalty))
        if greedy or temperature <= 0:
            _check(self._lib.nt_sampler_chain_add_greedy(h))
            return
        _check(self._lib.nt_sampler_chain_add_top_k(h, top_k))
        _check(self._lib.nt_sampler_chain_add_top_p(h, top_p))
        _check(self._lib.nt_sampler_chain_add_min_p(h, min_p))
        _check(self._lib.nt_sampler_chain_add_temp(h, temperature))
        _check(self._lib.nt_sampler_chain_add_dist(h, seed))

    def sample(self, context: "Context", i: int = -1) -> int:
        token = ctypes.c_int32()
        _check(self._lib.nt_sampler_sample(self._handle, context._handle, i, ctypes.byref(token)))
        return token.value

    def accept(self, token: int):
        _check(self._lib.nt_sampler_accept(self._handle, token))

    def reset(self):
        _check(self._lib.nt_sampler_reset(self._handle))

    def close(self):
        if getattr(self, "_handle", None):
            self._lib.nt_sampler_free(self._handle)
            self._handle = ctypes.c_void_p()

    __del__ = close


class Context:
    """The batch API over a model: decode batches, read logits, manage sequences and their saved states."""

    def __init__(self, model: "Model", *, n_ctx: int = 0, n_seq_max: int = 1, n_batch: int = 512,
                 kv_type: str = "f16", n_threads: int = 0):
        self._lib = _library()
        self.model = model
        params = self._lib.nt_context_default_params()
        params.n_ctx, params.n_seq_max, params.n_batch = n_ctx, n_seq_max, n_batch
        if kv_type not in _KV_TYPES:
            raise ValueError(f"kv_type {kv_type!r}: f16 or f32")
        params.kv_type, params.n_threads = _KV_TYPES[kv_type], n_threads
        self._handle = ctypes.c_void_p()
        _check(self._lib.nt_context_new(model._handle, ctypes.byref(params), ctypes.byref(self._handle)))
        model._contexts.append(self)

    @property
    def n_ctx(self) -> int:
        n = ctypes.c_uint32()
        _check(self._lib.nt_n_ctx(self._handle, ctypes.byref(n)))
        return n.value

    def decode(self, batch: Batch):
        _check(self._lib.nt_decode(self._handle, batch._handle))

    def logits(self, i: int = -1) -> List[float]:
        """The row of logits of batch entry i of the last decode (-1: the last that asked)."""
        row = ctypes.POINTER(ctypes.c_float)()
        _check(self._lib.nt_get_logits(self._handle, i, ctypes.byref(row)))
        return row[:self.model.vocab_size]

    def seq_length(self, seq: int = 0) -> int:
        n = ctypes.c_int32()
        _check(self._lib.nt_seq_length(self._handle, seq, ctypes.byref(n)))
        return n.value

    def seq_pos_min(self, seq: int = 0) -> int:
        """The first position every layer still holds (-1: empty); above 0 where sliding windows released the rest."""
        n = ctypes.c_int32()
        _check(self._lib.nt_seq_pos_min(self._handle, seq, ctypes.byref(n)))
        return n.value

    def seq_rm(self, seq: int, p0: int = -1, p1: int = -1):
        _check(self._lib.nt_seq_rm(self._handle, seq, p0, p1))

    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1):
        _check(self._lib.nt_seq_cp(self._handle, src, dst, p0, p1))

    def seq_keep(self, seq: int):
        _check(self._lib.nt_seq_keep(self._handle, seq))

    def clear(self):
        _check(self._lib.nt_memory_clear(self._handle))

    def save_state(self, seq: int = 0) -> bytes:
        size = ctypes.c_size_t()
        _check(self._lib.nt_seq_state_save(self._handle, seq, None, 0, ctypes.byref(size)), allow=(_BUFFER_TOO_SMALL,))
        buf = ctypes.create_string_buffer(size.value)
        _check(self._lib.nt_seq_state_save(self._handle, seq, buf, size.value, ctypes.byref(size)))
        return buf.raw[:size.value]

    def load_state(self, state: bytes, seq: int = 0):
        _check(self._lib.nt_seq_state_load(self._handle, seq, state, len(state)))

    def counters(self) -> dict:
        c = _Counters()
        _check(self._lib.nt_context_get_counters(self._handle, ctypes.byref(c)))
        return {name: getattr(c, name) for name, _ in _Counters._fields_}

    def description(self) -> str:
        return _sized_text(lambda buf, size, n: self._lib.nt_context_description(self._handle, buf, size, n))

    def greedy(self, tokens: Sequence[int], max_tokens: int, seq: int = 0) -> List[int]:
        """Greedy decoding after `tokens` on an emptied sequence, through nt_decode and a greedy chain: the ids,
        stopping before an end-of-generation token."""
        self.seq_rm(seq)
        batch = Batch(max(len(tokens), 1))
        for i, t in enumerate(tokens):
            batch.add(t, i, seq, i == len(tokens) - 1)
        sampler = Sampler(greedy=True)
        out: List[int] = []
        try:
            for pos in range(len(tokens), len(tokens) + max_tokens):
                self.decode(batch)
                token = sampler.sample(self)
                if self.model.is_eog(token):
                    break
                out.append(token)
                batch.clear().add(token, pos, seq, True)
        finally:
            batch.close()
            sampler.close()
        return out

    def close(self):
        if getattr(self, "_handle", None):
            self._lib.nt_context_free(self._handle)
            self._handle = ctypes.c_void_p()
            if self in self.model._contexts:
                self.model._contexts.remove(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    __del__ = close


# ---- Models and whole generations --------------------------------------------------------------------

Messages = Union[str, Sequence[dict]]


class Model:
    """A GGUF model and a context that runs its requests (n_seq_max at once)."""

    def __init__(self, path: Union[str, os.PathLike], *, device: str = "auto", n_ctx: int = 0, n_seq_max: int = 1,
                 n_batch: int = 512, kv_type: str = "f16", n_threads: int = 0, vram_budget: int = 0,
                 ram_budget: int = 0):
        self._lib = _library()
        if device not in _DEVICES:
            raise ValueError(f"device {device!r}: auto, cpu or cuda")
        params = self._lib.nt_model_default_params()
        self._path = os.fsencode(path)
        params.path, params.device = self._path, _DEVICES[device]
        params.vram_budget, params.ram_budget = vram_budget, ram_budget
        self._handle = ctypes.c_void_p()
        self._contexts: List[Context] = []
        _check(self._lib.nt_model_load(ctypes.byref(params), ctypes.byref(self._handle)))
        self._context_options = dict(n_ctx=n_ctx, n_seq_max=n_seq_max, n_batch=n_batch, kv_type=kv_type,
                                     n_threads=n_threads)
        self._requests: Optional[Context] = None
        self.vocab_size = self._int(self._lib.nt_vocab_size)

    def _int(self, fn) -> int:
        n = ctypes.c_int32()
        _check(fn(self._handle, ctypes.byref(n)))
        return n.value

    # Vocabulary and text.
    @property
    def bos(self) -> int:
        return self._int(self._lib.nt_token_bos)

    @property
    def eos(self) -> int:
        return self._int(self._lib.nt_token_eos)

    @property
    def n_layers(self) -> int:
        return self._int(self._lib.nt_model_n_layers)

    @property
    def n_ctx_train(self) -> int:
        return self._int(self._lib.nt_model_n_ctx_train)

    def is_eog(self, token: int) -> bool:
        out = ctypes.c_bool()
        _check(self._lib.nt_token_is_eog(self._handle, token, ctypes.byref(out)))
        return out.value

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> List[int]:
        data = text.encode("utf-8")
        n = ctypes.c_int32()
        status = self._lib.nt_tokenize(self._handle, data, len(data), None, 0, add_special, parse_special,
                                       ctypes.byref(n))
        _check(status, allow=(_BUFFER_TOO_SMALL,))
        if status == 0:
            return []
        tokens = (ctypes.c_int32 * -n.value)()
        _check(self._lib.nt_tokenize(self._handle, data, len(data), tokens, len(tokens), add_special, parse_special,
                                     ctypes.byref(n)))
        return list(tokens[:n.value])

    def token_to_piece(self, token: int, special: bool = False) -> bytes:
        n = ctypes.c_int32()
        buf = ctypes.create_string_buffer(64)
        if _check(self._lib.nt_token_to_piece(self._handle, token, special, buf, len(buf), ctypes.byref(n)),
                  allow=(_BUFFER_TOO_SMALL,)) == _BUFFER_TOO_SMALL:
            buf = ctypes.create_string_buffer(-n.value)
            _check(self._lib.nt_token_to_piece(self._handle, token, special, buf, len(buf), ctypes.byref(n)))
        return buf.raw[:n.value]

    def detokenize(self, tokens: Iterable[int], special: bool = False) -> str:
        return b"".join(self.token_to_piece(t, special) for t in tokens).decode("utf-8", "replace")

    def apply_chat_template(self, messages: Messages, add_assistant: bool = True,
                            template: Optional[str] = None) -> str:
        """The conversation as the model's chat template renders it (or a built-in one by name)."""
        messages = _messages(messages)
        keep = [(m["role"].encode(), m["content"].encode()) for m in messages]
        array = (_ChatMessage * len(keep))(*[_ChatMessage(r, c) for r, c in keep])
        tmpl = template.encode() if template else None
        return _sized_text(lambda buf, size, n: self._lib.nt_chat_apply_template(
            self._handle, tmpl, array, len(keep), add_assistant, buf, size, n))

    def plan(self, n_ctx: int = 0, n_seq_max: int = 1) -> dict:
        """Where the CUDA runner would place each layer under the model's budgets (nt_model_plan)."""
        params = self._lib.nt_context_default_params()
        params.n_ctx, params.n_seq_max = n_ctx, n_seq_max
        return json.loads(_sized_text(lambda buf, size, n: self._lib.nt_model_plan(
            self._handle, ctypes.byref(params), buf, size, n)))

    # Contexts.
    def context(self, **options) -> Context:
        """A context for the token-level API (n_ctx, n_seq_max, n_batch, kv_type, n_threads)."""
        return Context(self, **options)

    def _request_context(self) -> Context:
        if self._requests is None:
            self._requests = Context(self, **self._context_options)
        return self._requests

    def counters(self) -> dict:
        """The request context's counters: passes, tokens, seconds, bytes per token."""
        return self._request_context().counters()

    # Whole generations.
    def generate(self, prompt: str, *, stream: bool = False, **sampling) -> Union[str, Iterator[str]]:
        """The continuation of a raw prompt (BOS as the vocabulary wants, no template). Sampling: max_tokens
        (-1: until the end of text), temperature (<= 0: greedy), top_k, top_p, min_p, repeat_penalty,
        repeat_last_n, frequency_penalty, presence_penalty, seed, stop (strings), ignore_eos. stream=True
        gives the text as it comes."""
        pieces = self._run(prompt.encode("utf-8"), None, sampling)
        return pieces if stream else "".join(pieces)

    def chat(self, messages: Messages, *, stream: bool = False, **sampling) -> Union[str, Iterator[str]]:
        """The assistant's reply to a conversation (a list of {"role", "content"}, or one user message),
        rendered by the model's chat template; stops at its end of turn."""
        payload = json.dumps(_messages(messages)).encode("utf-8")
        pieces = self._run(None, payload, sampling)
        return pieces if stream else "".join(pieces)

    def _run(self, prompt: Optional[bytes], messages: Optional[bytes], sampling: dict) -> Iterator[str]:
        ctx = self._request_context()
        params = self._lib.nt_request_default_params()
        stop = sampling.pop("stop", None) or []
        if isinstance(stop, str):
            stop = [stop]
        for key, value in sampling.items():
            if key not in dict(_RequestParams._fields_) or key in ("stop", "n_stop", "on_text", "user_data"):
                raise TypeError(f"unknown sampling option {key!r}")
            setattr(params, key, value)
        stop_bytes = [s.encode("utf-8") for s in stop]
        stop_array = (ctypes.c_char_p * max(len(stop_bytes), 1))(*stop_bytes)
        params.stop, params.n_stop = ctypes.cast(stop_array, ctypes.POINTER(ctypes.c_char_p)), len(stop_bytes)
        request = ctypes.c_uint64()
        _check(self._lib.nt_request_submit(ctx._handle, prompt, messages, ctypes.byref(params),
                                           ctypes.byref(request)))
        return _Stream(self._lib, ctx, request.value)

    def close(self):
        if getattr(self, "_handle", None):
            for ctx in list(self._contexts):
                ctx.close()
            self._requests = None
            self._lib.nt_model_free(self._handle)
            self._handle = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    __del__ = close


class _Stream:
    """A request's text as it comes; closing it early cancels the request. After the end, `stop_reason`,
    `prompt_tokens` and `completion_tokens` say how it ended."""

    def __init__(self, lib, ctx: Context, request: int):
        self._lib, self._ctx, self.id = lib, ctx, request
        self._done = False
        self.stop_reason: Optional[str] = None
        self.prompt_tokens = self.completion_tokens = 0

    def __iter__(self):
        return self

    def __next__(self) -> str:
        buf = ctypes.create_string_buffer(4096)
        while not self._done:
            n = ctypes.c_size_t()
            status = _RequestStatus()
            _check(self._lib.nt_request_poll(self._ctx._handle, self.id, 200, buf, len(buf), ctypes.byref(n),
                                             ctypes.byref(status)))
            if status.state == 1:
                self._done = True
                self.stop_reason = _STOP_REASONS.get(status.stop)
                self.prompt_tokens, self.completion_tokens = status.prompt_tokens, status.completion_tokens
            if n.value:
                return buf.raw[:n.value].decode("utf-8", "replace")
        raise StopIteration

    def close(self):
        """Cancels the request if it is still running, and reads it to its end."""
        if self._done or not self._ctx._handle:
            return
        self._lib.nt_request_cancel(self._ctx._handle, self.id)
        for _ in self:
            pass

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def _messages(messages: Messages) -> List[dict]:
    if isinstance(messages, str):
        return [{"role": "user", "content": messages}]
    out = []
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise TypeError("each message is a dict with string 'role' and 'content'")
        out.append({"role": m["role"], "content": m["content"]})
    return out
