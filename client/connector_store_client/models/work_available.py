from typing import Optional

from pydantic import Field

from .base_model import BaseModel


class WorkAvailable(BaseModel):
    work_available: "WorkAvailableWorkAvailable" = Field(alias="workAvailable")


class WorkAvailableWorkAvailable(BaseModel):
    connector_name: Optional[str] = Field(alias="connectorName")
    at: int


WorkAvailable.model_rebuild()
