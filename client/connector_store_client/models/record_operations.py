from typing import Optional

from pydantic import Field

from .base_model import BaseModel
from .fragments import Settled


class RecordOperations(BaseModel):
    record_operations: "RecordOperationsRecordOperations" = Field(
        alias="recordOperations"
    )


class RecordOperationsRecordOperations(BaseModel):
    results: list["RecordOperationsRecordOperationsResults"]


class RecordOperationsRecordOperationsResults(BaseModel):
    applied: bool
    operation: Optional["RecordOperationsRecordOperationsResultsOperation"]


RecordOperationsRecordOperationsResultsOperation = Settled
RecordOperations.model_rebuild()
RecordOperationsRecordOperations.model_rebuild()
RecordOperationsRecordOperationsResults.model_rebuild()
