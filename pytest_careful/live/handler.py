"""What the plugin holds of a BFCL model handler.

A handler is an instance of one of bfcl-eval's ``BaseHandler`` subclasses (the registry's, or
:mod:`.backends.scripted`'s), with the attributes the plugin adds to it (``careful_*``; its ``client``
re-pointed by :mod:`.backends.vllm.client`). bfcl-eval is imported on first use only, its handler classes
are untyped, and the plugin sets attributes they do not declare: the name says what the value
is, and its type stays open.
"""

from typing import Any

Handler = Any

#: The dicts a handler's steps pass along and return (``inference_data``, a test entry, a parsed
#: response, a result entry as BFCL's loop builds it): bfcl-eval's own untyped protocol, JSON-like,
#: its keys as ``BaseHandler`` reads them.
BfclDict = dict[str, Any]
