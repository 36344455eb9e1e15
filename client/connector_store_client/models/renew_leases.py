from typing import Optional

from pydantic import Field

from .base_model import BaseModel


class RenewLeases(BaseModel):
    renew_leases: "RenewLeasesRenewLeases" = Field(alias="renewLeases")


class RenewLeasesRenewLeases(BaseModel):
    renewed: list["RenewLeasesRenewLeasesRenewed"]


class RenewLeasesRenewLeasesRenewed(BaseModel):
    caller_did: str = Field(alias="callerDID")
    operation_id: str = Field(alias="operationID")
    lease_expires_at: Optional[int] = Field(alias="leaseExpiresAt")


RenewLeases.model_rebuild()
RenewLeasesRenewLeases.model_rebuild()
