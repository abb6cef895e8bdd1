"""What Amazon Bedrock's Converse API accepts, checked without calling it.

Two layers, as the service has them:

- :func:`botocore_errors` runs botocore's own parameter validation of the Converse input
  against a ``bedrock-runtime`` service model (shapes, required members, one member per
  union block such as ``{"text": …}`` or ``{"cachePoint": …}``): botocore 1.44.5's, kept
  as test data (``tests/data/botocore-1.44.5``), because the botocore aioboto3 pins
  (1.40.61) predates ``CachePointBlock.ttl`` and would refuse every cache-aligned view;
- :func:`service_rule_errors` states the rules only the service enforces, each beside the
  ValidationException text it answers to (as users of LangChain, Semantic Kernel, Dify,
  LiteLLM and Portkey have reported them against the live service), cache points
  included (:func:`cache_point_errors`: at most 4, none first in a message).

"Blank" is Python's Unicode whitespace, a superset of the Java whitespace the service
trims, so this checker is at least as strict as the service.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from botocore.loaders import Loader
from botocore.model import ServiceModel
from botocore.validate import ParamValidator

#: Any model id: the service model only requires one to be there.
MODEL_ID = "anthropic.claude-sonnet-4-20250514-v1:0"

#: The first botocore whose bedrock-runtime model this checker uses: it knows
#: ``CachePointBlock.ttl`` (enum ``5m`` / ``1h``).
BOTOCORE_MODEL_VERSION = "1.44.5"
MODEL_DIR = Path(__file__).parent / "data" / f"botocore-{BOTOCORE_MODEL_VERSION}"

#: botocore 1.44.5's bedrock-runtime model, loaded once for every check of the tests.
SERVICE = ServiceModel(
    Loader(
        extra_search_paths=[str(MODEL_DIR)], include_default_search_paths=False
    ).load_service_model("bedrock-runtime", "service-2"),
    "bedrock-runtime",
)
_CONVERSE_INPUT = SERVICE.operation_model("Converse").input_shape
#: The TTLs the model's ``CacheTTL`` enum names (botocore does not check enums itself).
CACHE_TTLS = tuple(SERVICE.shape_for("CacheTTL").enum)


def botocore_errors(converse: dict[str, Any]) -> str | None:
    """botocore's validation report for ``converse(modelId=…, system=…, messages=…)``."""
    params = {"modelId": MODEL_ID, "system": converse["system"], "messages": converse["messages"]}
    report = ParamValidator().validate(params, _CONVERSE_INPUT)
    return report.generate_report() if report.has_errors() else None


def _blank(text: str) -> bool:
    return not text or text.isspace()


def service_rule_errors(converse: dict[str, Any]) -> list[str]:
    """The rules the service checks on top of the model's shapes; empty when accepted."""
    errors: list[str] = []
    messages = converse["messages"]
    # "A conversation must start with a user message. Try again with a conversation that
    # starts with a user message."
    if not messages or messages[0]["role"] != "user":
        errors.append("A conversation must start with a user message.")
    # "A conversation must alternate between user and assistant roles. Make sure the
    # conversation alternates between user and assistant roles and try again."
    for i in range(1, len(messages)):
        if messages[i]["role"] == messages[i - 1]["role"]:
            errors.append(f"A conversation must alternate between user and assistant (at {i}).")
    # Without a prefilled answer the last turn is the user's: the model answers it.
    if messages and messages[-1]["role"] != "user":
        errors.append("The conversation must end with a user message.")
    for i, message in enumerate(messages):
        # "Value at 'messages.N.member.role' failed to satisfy constraint: Member must
        # satisfy enum value set: [user, assistant]" (botocore does not check enums)
        if message["role"] not in ("user", "assistant"):
            errors.append(f"messages.{i}.role is not user or assistant.")
        # "The content field in the Message object at messages.N is empty. Add a
        # ContentBlock object to the content field and try again."
        if not message["content"]:
            errors.append(f"The content field in the Message object at messages.{i} is empty.")
        for j, block in enumerate(message["content"]):
            # "The text field in the ContentBlock object at messages.N.content.M is blank.
            # Add text to the text field, and try again."
            if "text" in block and _blank(block["text"]):
                errors.append(
                    f"The text field in the ContentBlock object at messages.{i}.content.{j} "
                    "is blank."
                )
    for k, block in enumerate(converse["system"]):
        if "text" in block and _blank(block["text"]):
            errors.append(f"The text field in the SystemContentBlock at system.{k} is blank.")
    return errors + cache_point_errors(converse)


#: Bedrock's limit of cache points in one request (system, messages and tools together).
MAX_CACHE_POINTS = 4


def cache_point_errors(converse: dict[str, Any]) -> list[str]:
    """The cache-point rules: at most 4 in a request, none first in a message, the
    ``default`` type (the only one botocore's model names; it does not check enums)."""
    errors: list[str] = []
    points = [block for block in converse["system"] if "cachePoint" in block]
    for i, message in enumerate(converse["messages"]):
        for j, block in enumerate(message["content"]):
            if "cachePoint" not in block:
                continue
            points.append(block)
            # A cache point marks the end of the content before it: a message that opens
            # on one has none of its own before it (the contract forbids it outright).
            if j == 0:
                errors.append(f"The cachePoint at messages.{i}.content.0 opens its message.")
    # "A maximum of 4 blocks with cache_control may be provided." (Anthropic's wording;
    # Bedrock refuses the request with a ValidationException.)
    if len(points) > MAX_CACHE_POINTS:
        errors.append(f"A request holds {len(points)} cache points; at most 4 are allowed.")
    lives = []
    for point in points:
        if point["cachePoint"].get("type") != "default":
            errors.append("A cachePoint's type must be default.")
        ttl = point["cachePoint"].get("ttl", "5m")
        if ttl not in CACHE_TTLS:
            errors.append(f"A cachePoint's ttl must be one of {', '.join(CACHE_TTLS)}.")
        lives.append(ttl == "1h")
    # Bedrock refuses a point with a longer TTL than one before it (tools, system,
    # messages): a 1h point after a 5m one.
    if any(later and not earlier for earlier, later in itertools.pairwise(lives)):
        errors.append("A cachePoint has a longer ttl than a cachePoint before it.")
    return errors


def converse_errors(converse: dict[str, Any]) -> list[str]:
    """Everything Converse would refuse in this view: botocore's report and the service's."""
    report = botocore_errors(converse)
    return ([report] if report else []) + service_rule_errors(converse)


def assert_model_ready(payload: dict[str, Any]) -> None:
    """A prompt payload's ``converse`` view is accepted, and ends on its current message."""
    converse = payload["converse"]
    assert set(converse) == {"system", "messages"}
    assert converse_errors(converse) == []
    assert converse["messages"][-1]["content"][-1] == {"text": payload["message"]}


def contract_digests(converse: dict[str, Any]) -> list[str]:
    """Each cache point's ``prefix_digest`` as the contract defines it ("The bill, observed"):
    the first 16 hex digits of the SHA-256 of the view's canonical JSON up to the point,
    written here from the contract's words: the ``system`` texts and the messages (role and
    texts, the last one as far as the point), the point blocks left out, keys sorted, no
    whitespace, UTF-8."""
    import hashlib
    import json

    digests: list[str] = []
    system: list[str] = []
    messages: list[dict[str, Any]] = []

    def digest() -> str:
        canonical = json.dumps(
            {"system": system, "messages": messages},
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
        )
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]

    for block in converse["system"]:
        if "cachePoint" in block:
            digests.append(digest())
        else:
            system.append(block["text"])
    for message in converse["messages"]:
        messages.append({"role": message["role"], "content": []})
        for block in message["content"]:
            if "cachePoint" in block:
                digests.append(digest())
            else:
                messages[-1]["content"].append(block["text"])
    return digests
