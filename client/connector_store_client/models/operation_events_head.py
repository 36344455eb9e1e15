from pydantic import Field

from .base_model import BaseModel


class OperationEventsHead(BaseModel):
    operation_events_head: str = Field(alias="operationEventsHead")
