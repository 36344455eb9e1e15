from pydantic import Field

from .base_model import BaseModel


class ReleaseLeases(BaseModel):
    release_leases: "ReleaseLeasesReleaseLeases" = Field(alias="releaseLeases")


class ReleaseLeasesReleaseLeases(BaseModel):
    released: list["ReleaseLeasesReleaseLeasesReleased"]


class ReleaseLeasesReleaseLeasesReleased(BaseModel):
    caller_did: str = Field(alias="callerDID")
    operation_id: str = Field(alias="operationID")


ReleaseLeases.model_rebuild()
ReleaseLeasesReleaseLeases.model_rebuild()
