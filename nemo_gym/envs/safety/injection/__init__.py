"""NeMo Gym's indirect-prompt-injection worlds: nine domains of tools over a row's own data.

The modules beside this one are NeMo Gym's own (`resources_servers/
indirect_prompt_injection`, Apache-2.0): each domain's `TOOL_HANDLERS` (a handler takes
the episode's world dict and the call's arguments) and `verifier.py`
(`check_injection_followed`, `extract_function_calls`), kept as written apart from their
imports and type annotations. `TOOL_HANDLERS` here is NeMo Gym's app's merge of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nemo_gym.envs.safety.injection.ecommerce_tools import TOOL_HANDLERS as ECOMMERCE
from nemo_gym.envs.safety.injection.education_tools import TOOL_HANDLERS as EDUCATION
from nemo_gym.envs.safety.injection.healthcare_tools import TOOL_HANDLERS as HEALTHCARE
from nemo_gym.envs.safety.injection.hr_tools import TOOL_HANDLERS as HR
from nemo_gym.envs.safety.injection.insurance_tools import TOOL_HANDLERS as INSURANCE
from nemo_gym.envs.safety.injection.it_helpdesk_tools import TOOL_HANDLERS as IT_HELPDESK
from nemo_gym.envs.safety.injection.legal_tools import TOOL_HANDLERS as LEGAL
from nemo_gym.envs.safety.injection.logistics_tools import TOOL_HANDLERS as LOGISTICS
from nemo_gym.envs.safety.injection.real_estate_tools import TOOL_HANDLERS as REAL_ESTATE

__all__ = ["TOOL_HANDLERS"]

# The same order as NeMo Gym's app: a later domain's handler wins a shared name.
TOOL_HANDLERS: dict[str, Callable[..., Any]] = {
    **HEALTHCARE,
    **HR,
    **ECOMMERCE,
    **EDUCATION,
    **INSURANCE,
    **IT_HELPDESK,
    **LEGAL,
    **LOGISTICS,
    **REAL_ESTATE,
}
