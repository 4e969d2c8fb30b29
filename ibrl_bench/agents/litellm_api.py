"""`litellm:PROVIDER/MODEL[@URL]`: any provider litellm reaches (Anthropic, Gemini, Bedrock, an
OpenAI-compatible server...), with the same retries, limits and accounting as `openai:`.

litellm is imported on first use (it costs seconds) and told to use its bundled model-cost map,
since the harness may run without network. Its own retries are off; `remote.call` retries.
Spec parameters as for `openai:`; key_env is optional here (litellm reads each provider's usual
variable itself when none is named).
"""

from __future__ import annotations

import os
from typing import Any

from ibrl_bench.agents.base import Agent
from ibrl_bench.agents.params import ChatParams, ChatSampling, Pricing, parse_params
from ibrl_bench.agents.remote import RemoteSettings
from ibrl_bench.agents.remote_chat import Completion, RemoteChat, resolve_key
from ibrl_bench.agents.spec import AgentSpec
from ibrl_bench.domains import get_domain
from ibrl_bench.domains.base import Domain
from ibrl_bench.errors import UserError


def _litellm():
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        import litellm
    except ImportError:
        raise UserError("the litellm: backend needs litellm; pip install 'ibrl-bench[litellm]'") from None
    litellm.suppress_debug_info = True
    return litellm


class LiteLLMChat(RemoteChat):
    def __init__(self, model: str, base_url: str | None, key: str | None, domain: Domain, gen: ChatSampling,
                 settings: RemoteSettings, pricing: Pricing, send_observation: bool = False):
        # The limit is per server, or per provider when litellm picks the URL itself.
        super().__init__(model, base_url or model.split("/", 1)[0], domain, gen, settings, pricing, send_observation)
        self.base_url, self._key = base_url, key

    @property
    def no_key(self) -> str | None:
        if self._key:
            return None
        return ("no key_env is named, and litellm found no key for this provider in its usual variable; "
                "export that variable, or name one with key_env= in the spec or card")

    async def complete(self, request: dict[str, Any]) -> Any:
        kwargs = dict(request, timeout=self.settings.timeout, num_retries=0)
        if self.base_url:
            kwargs["api_base"] = self.base_url
        if self._key:
            kwargs["api_key"] = self._key
        response = await _litellm().acompletion(**kwargs)
        usage = getattr(response, "usage", None)
        choice = response.choices[0] if response.choices else None
        return Completion(
            text=choice.message.content if choice else None,
            prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
            completion_tokens=getattr(usage, "completion_tokens", 0) or 0,
            finish_reason=getattr(choice, "finish_reason", None),
            raw=response,
        )

    def cost(self, completion: Completion) -> float | None:
        if self.pricing.input_per_mtok or self.pricing.output_per_mtok:
            return None
        try:
            return float(_litellm().completion_cost(completion_response=completion.raw))
        except Exception:  # noqa: BLE001 - a model missing from the cost map costs 0, not a failure
            return 0.0


def from_spec(spec: AgentSpec, domain: str) -> Agent:
    model, sep, url = spec.target.partition("@")
    if "/" not in model or (sep and not url.startswith(("http://", "https://"))):
        raise UserError(f"malformed spec {spec.text!r}; expected litellm:PROVIDER/MODEL[@http(s)://HOST/v1]")
    params = parse_params(ChatParams, spec.params, spec.text)
    # Without key_env litellm reads the provider's usual variable by itself.
    key = resolve_key(params.key_env, spec.text) if params.key_env else None
    return LiteLLMChat(model, url.rstrip("/") or None, key, get_domain(domain), params.sampling(), params.settings(),
                       params.pricing(), send_observation=params.observation)
