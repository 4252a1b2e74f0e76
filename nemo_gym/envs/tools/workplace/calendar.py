# SPDX-FileCopyrightText: Copyright (c) 2025 NVIDIA CORPORATION & AFFILIATES. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
# http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
import pandas as pd

from nemo_gym.envs.tools.workplace.frames import frame


class CalendarTool:
    def __init__(self):
        self.reset_state()

    def reset_state(self):
        self._calendar_events = frame("calendar_events.csv")

    def get_event_information_by_id(self, event_id=None, field=None):
        if not event_id:
            return "Event ID not provided."
        if not field:
            return "Field not provided."

        # Validate event_id format
        if not (isinstance(event_id, str) and len(event_id) == 8 and event_id.isdigit()):
            return "Invalid event ID format. Expected 8-digit ID."

        # Validate field exists
        valid_fields = [
            "event_id",
            "event_name",
            "participant_email",
            "event_start",
            "duration",
        ]
        if field not in valid_fields:
            return f"Invalid field. Available fields are: {', '.join(valid_fields)}"

        event = self._calendar_events[self._calendar_events["event_id"] == event_id].to_dict(
            orient="records"
        )
        if event:
            if field in event[0]:
                return {field: event[0][field]}
            else:
                return "Field not found."
        else:
            return "Event not found."

    def search_events(self, query="", time_min=None, time_max=None, page=1, page_size=5):
        # Validate time formats if provided
        if time_min:
            try:
                time_min = pd.Timestamp(time_min)
            except ValueError:
                return "Invalid time_min format. Expected YYYY-MM-DD HH:MM:SS."

        if time_max:
            try:
                time_max = pd.Timestamp(time_max)
            except ValueError:
                return "Invalid time_max format. Expected YYYY-MM-DD HH:MM:SS."

        events = self._calendar_events[
            (self._calendar_events["event_name"].str.contains(query, case=False, na=False))
            | (self._calendar_events["participant_email"].str.contains(query, case=False, na=False))
        ].to_dict(orient="records")

        if time_min:
            events = [event for event in events if pd.Timestamp(event["event_start"]) >= time_min]
        if time_max:
            events = [event for event in events if pd.Timestamp(event["event_start"]) <= time_max]

        if events:
            # Sort events by start time (most recent first)
            events.sort(key=lambda x: pd.Timestamp(x["event_start"]), reverse=True)

            # Calculate pagination
            total_events = len(events)
            total_pages = (total_events + page_size - 1) // page_size  # Ceiling division

            # Validate page number
            page = max(1, min(page, total_pages)) if total_pages > 0 else 1

            # Calculate start and end indices for slicing
            start_idx = (page - 1) * page_size
            end_idx = min(start_idx + page_size, total_events)

            return {
                "events": events[start_idx:end_idx],
                "pagination": {
                    "total_events": total_events,
                    "page": page,
                    "page_size": page_size,
                    "total_pages": total_pages,
                },
            }
        else:
            return "No events found."

    def create_event(
        self, event_name=None, participant_email=None, event_start=None, duration=None
    ):
        if not event_name:
            return "Event name not provided."
        if not participant_email:
            return "Participant email not provided."
        if not event_start:
            return "Event start not provided."
        if not duration:
            return "Event duration not provided."

        # Validate event_start format
        try:
            pd.Timestamp(event_start)
        except ValueError:
            return "Invalid event_start format. Expected YYYY-MM-DD HH:MM:SS."

        # Validate duration is a positive number
        try:
            duration_val = int(duration)
            if duration_val <= 0:
                return "Duration must be a positive number of minutes."
        except ValueError:
            return "Invalid duration format. Expected a number of minutes."

        participant_email = participant_email.lower()

        event_id = str(int(self._calendar_events["event_id"].max()) + 1).zfill(8)
        new_event = pd.DataFrame(
            {
                "event_id": [event_id],
                "event_name": [event_name],
                "participant_email": [participant_email],
                "event_start": [event_start],
                "duration": [duration],
            }
        )
        self._calendar_events = pd.concat([self._calendar_events, new_event])
        return event_id

    def delete_event(self, event_id=None):
        if not event_id:
            return "Event ID not provided."

        # Validate event_id format
        if not (isinstance(event_id, str) and len(event_id) == 8 and event_id.isdigit()):
            return "Invalid event ID format. Expected 8-digit ID."

        if event_id in self._calendar_events["event_id"].values:
            self._calendar_events = self._calendar_events[
                self._calendar_events["event_id"] != event_id
            ]
            return "Event deleted successfully."
        else:
            return "Event not found."

    def update_event(self, event_id=None, field=None, new_value=None):
        if not event_id or not field or not new_value:
            return "Event ID, field, or new value not provided."

        # Validate event_id format
        if not (isinstance(event_id, str) and len(event_id) == 8 and event_id.isdigit()):
            return "Invalid event ID format. Expected 8-digit ID."

        # Validate field name
        valid_fields = ["event_name", "participant_email", "event_start", "duration"]
        if field not in valid_fields:
            return f"Invalid field. Available fields are: {', '.join(valid_fields)}"

        # Validate field-specific values
        if field == "event_start":
            try:
                pd.Timestamp(new_value)
            except ValueError:
                return "Invalid event_start format. Expected YYYY-MM-DD HH:MM:SS."
        elif field == "duration":
            try:
                duration_val = int(new_value)
                if duration_val <= 0:
                    return "Duration must be a positive number of minutes."
            except ValueError:
                return "Invalid duration format. Expected a number of minutes."

        if event_id in self._calendar_events["event_id"].values:
            if field == "participant_email":
                new_value = new_value.lower()
            self._calendar_events.loc[self._calendar_events["event_id"] == event_id, field] = (
                new_value
            )
            return "Event updated successfully."
        else:
            return "Event not found."
