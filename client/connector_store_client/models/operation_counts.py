from pydantic import Field

from .base_model import BaseModel
from .enums import OperationState


class OperationCounts(BaseModel):
    operation_counts: list["OperationCountsOperationCounts"] = Field(
        alias="operationCounts"
    )


class OperationCountsOperationCounts(BaseModel):
    state: OperationState
    count: int


OperationCounts.model_rebuild()
