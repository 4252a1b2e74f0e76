"""NeMo Gym's workplace assistant world (WorkBench): five toolkits over pandas tables.

The toolkit modules beside this one are NeMo Gym's own (`resources_servers/
workplace_assistant/workplace_assistant_tools`, Apache-2.0), kept as written apart from
reading their tables through `frames.frame` and dropping the tool schemas (rows carry
their own). `World` is NeMo Gym's `get_tools`, `World.call` its tool route, and
`same_state` its `is_correct`: two worlds agree when every mutable table is equal after
lower-casing the fields it compares case-insensitively.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from nemo_gym.errors import MissingDependency

try:
    import pandas as pd
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingDependency("pandas", "workplace") from exc

from nemo_gym.envs.tools.workplace.analytics import AnalyticsTool
from nemo_gym.envs.tools.workplace.calendar import CalendarTool
from nemo_gym.envs.tools.workplace.company_directory import CompanyDirectoryTool
from nemo_gym.envs.tools.workplace.customer_relationship_manager import (
    CustomerRelationshipManagerTool,
)
from nemo_gym.envs.tools.workplace.email import EmailTool
from nemo_gym.envs.tools.workplace.project_management import ProjectManagementTool

__all__ = ["World", "same_state"]

# NeMo Gym compares these fields case-sensitively (its `convert_strs_to_lowercase`).
_CASED = frozenset({"status", "list_name", "board"})


class World:
    """One fresh workplace: every toolkit at its initial tables."""

    def __init__(self) -> None:
        directory = CompanyDirectoryTool()
        self.email = EmailTool()
        self.calendar = CalendarTool()
        self.analytics = AnalyticsTool()
        self.project_management = ProjectManagementTool()
        self.crm = CustomerRelationshipManagerTool()
        pm, crm = self.project_management, self.crm
        self.functions: dict[str, Callable[..., Any]] = {
            "company_directory_find_email_address": directory.find_email_address,
            "email_get_email_information_by_id": self.email.get_email_information_by_id,
            "email_search_emails": self.email.search_emails,
            "email_send_email": self.email.send_email,
            "email_delete_email": self.email.delete_email,
            "email_forward_email": self.email.forward_email,
            "email_reply_email": self.email.reply_email,
            "calendar_get_event_information_by_id": self.calendar.get_event_information_by_id,
            "calendar_search_events": self.calendar.search_events,
            "calendar_create_event": self.calendar.create_event,
            "calendar_delete_event": self.calendar.delete_event,
            "calendar_update_event": self.calendar.update_event,
            "analytics_engaged_users_count": self.analytics.engaged_users_count,
            "analytics_get_visitor_information_by_id": self.analytics.get_visitor_information_by_id,
            "analytics_create_plot": self.analytics.create_plot,
            "analytics_traffic_source_count": self.analytics.traffic_source_count,
            "analytics_total_visits_count": self.analytics.total_visits_count,
            "analytics_get_average_session_duration": self.analytics.get_average_session_duration,
            "project_management_get_task_information_by_id": pm.get_task_information_by_id,
            "project_management_search_tasks": pm.search_tasks,
            "project_management_create_task": pm.create_task,
            "project_management_delete_task": pm.delete_task,
            "project_management_update_task": pm.update_task,
            "customer_relationship_manager_search_customers": crm.search_customers,
            "customer_relationship_manager_update_customer": crm.update_customer,
            "customer_relationship_manager_add_customer": crm.add_customer,
            "customer_relationship_manager_delete_customer": crm.delete_customer,
        }

    def call(self, name: str, arguments: Mapping[str, Any]) -> Any:
        """Run one tool as NeMo Gym's route does: null arguments dropped, an exception
        returned to the model as text (so it can correct itself), not raised."""
        args = {k: v for k, v in arguments.items() if v is not None}
        try:
            return self.functions[name](**args)
        except Exception as e:
            return f"Error executing tool '{name}': {e}"

    def replay(self, calls: Iterable[Mapping[str, Any]]) -> World:
        """Run `calls` ({"name", "arguments": JSON text}) in order, as NeMo Gym's
        `execute_actions_and_reset_state`: a call that fails in any way is skipped."""
        for call in calls:
            try:
                self.functions[call["name"]](**json.loads(call["arguments"]))
            except Exception:
                continue
        return self

    def tables(self) -> list[pd.DataFrame]:
        """The tables `same_state` compares (the directory and the emails' search never change)."""
        return [
            self.calendar._calendar_events,
            self.email._emails,
            self.analytics._plots_data,
            self.project_management._project_tasks,
            self.crm._crm_data,
        ]


def _lowered(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    for col in df.columns:
        if col not in _CASED:
            df[col] = df[col].str.lower()
    return df


def same_state(a: World, b: World) -> bool:
    """NeMo Gym's `is_correct`: every mutable table equal, case-insensitive but for
    `status`, `list_name` and `board`."""
    return all(_lowered(x).equals(_lowered(y)) for x, y in zip(a.tables(), b.tables(), strict=True))
