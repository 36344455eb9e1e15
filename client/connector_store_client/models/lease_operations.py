from pydantic import Field

from .base_model import BaseModel
from .fragments import LeasedOperation


class LeaseOperations(BaseModel):
    lease_operations: "LeaseOperationsLeaseOperations" = Field(alias="leaseOperations")


class LeaseOperationsLeaseOperations(BaseModel):
    operations: list["LeaseOperationsLeaseOperationsOperations"]


LeaseOperationsLeaseOperationsOperations = LeasedOperation
LeaseOperations.model_rebuild()
LeaseOperationsLeaseOperations.model_rebuild()
