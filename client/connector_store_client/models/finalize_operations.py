from typing import Optional

from pydantic import Field

from .base_model import BaseModel
from .fragments import Settled


class FinalizeOperations(BaseModel):
    finalize_operations: "FinalizeOperationsFinalizeOperations" = Field(
        alias="finalizeOperations"
    )


class FinalizeOperationsFinalizeOperations(BaseModel):
    results: list["FinalizeOperationsFinalizeOperationsResults"]


class FinalizeOperationsFinalizeOperationsResults(BaseModel):
    applied: bool
    operation: Optional["FinalizeOperationsFinalizeOperationsResultsOperation"]


FinalizeOperationsFinalizeOperationsResultsOperation = Settled
FinalizeOperations.model_rebuild()
FinalizeOperationsFinalizeOperations.model_rebuild()
FinalizeOperationsFinalizeOperationsResults.model_rebuild()
