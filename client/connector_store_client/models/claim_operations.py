from typing import Annotated, Literal, Union

from pydantic import Field

from .base_model import BaseModel
from .enums import OperationState
from .fragments import Settled


class ClaimOperations(BaseModel):
    claim_operations: "ClaimOperationsClaimOperations" = Field(alias="claimOperations")


class ClaimOperationsClaimOperations(BaseModel):
    results: list[
        Annotated[
            Union[
                "ClaimOperationsClaimOperationsResultsOperationClaimed",
                "ClaimOperationsClaimOperationsResultsOperationExists",
                "ClaimOperationsClaimOperationsResultsOperationConflict",
                "ClaimOperationsClaimOperationsResultsOperationCollected",
            ],
            Field(discriminator="typename__"),
        ]
    ]


class ClaimOperationsClaimOperationsResultsOperationClaimed(BaseModel):
    typename__: Literal["OperationClaimed"] = Field(alias="__typename")
    operation: "ClaimOperationsClaimOperationsResultsOperationClaimedOperation"


ClaimOperationsClaimOperationsResultsOperationClaimedOperation = Settled


class ClaimOperationsClaimOperationsResultsOperationExists(BaseModel):
    typename__: Literal["OperationExists"] = Field(alias="__typename")
    operation: "ClaimOperationsClaimOperationsResultsOperationExistsOperation"


ClaimOperationsClaimOperationsResultsOperationExistsOperation = Settled


class ClaimOperationsClaimOperationsResultsOperationConflict(BaseModel):
    typename__: Literal["OperationConflict"] = Field(alias="__typename")
    caller_did: str = Field(alias="callerDID")
    operation_id: str = Field(alias="operationID")
    message: str


class ClaimOperationsClaimOperationsResultsOperationCollected(BaseModel):
    typename__: Literal["OperationCollected"] = Field(alias="__typename")
    caller_did: str = Field(alias="callerDID")
    operation_id: str = Field(alias="operationID")
    final_state: OperationState = Field(alias="finalState")
    collected_at: int = Field(alias="collectedAt")


ClaimOperations.model_rebuild()
ClaimOperationsClaimOperations.model_rebuild()
ClaimOperationsClaimOperationsResultsOperationClaimed.model_rebuild()
ClaimOperationsClaimOperationsResultsOperationExists.model_rebuild()
