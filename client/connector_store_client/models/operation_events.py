from typing import Optional

from pydantic import Field

from .base_model import BaseModel
from .enums import OperationAction, OperationState


class OperationEvents(BaseModel):
    operation_events: "OperationEventsOperationEvents" = Field(alias="operationEvents")


class OperationEventsOperationEvents(BaseModel):
    sequence: str
    at: int
    action: OperationAction
    actor_did: Optional[str] = Field(alias="actorDID")
    from_state: Optional[OperationState] = Field(alias="fromState")
    to_state: OperationState = Field(alias="toState")
    attempts: int
    kind: Optional[str]
    http_status: Optional[int] = Field(alias="httpStatus")
    message: Optional[str]
    operation: Optional["OperationEventsOperationEventsOperation"]


class OperationEventsOperationEventsOperation(BaseModel):
    caller_did: str = Field(alias="callerDID")
    operation_id: str = Field(alias="operationID")
    connector_name: str = Field(alias="connectorName")
    account_key: str = Field(alias="accountKey")
    state: OperationState
    version: int
    updated_at: int = Field(alias="updatedAt")


OperationEvents.model_rebuild()
OperationEventsOperationEvents.model_rebuild()
