from typing import Any, Optional

from pydantic import Field

from .base_model import BaseModel
from .enums import OperationState


class OperationOutcome(BaseModel):
    operation: Optional["OperationOutcomeOperation"]


class OperationOutcomeOperation(BaseModel):
    caller_did: str = Field(alias="callerDID")
    operation_id: str = Field(alias="operationID")
    state: OperationState
    attempts: int
    last_kind: Optional[str] = Field(alias="lastKind")
    last_error: Optional[str] = Field(alias="lastError")
    result_entity: Optional[Any] = Field(alias="resultEntity")


OperationOutcome.model_rebuild()
