from typing import Optional

from pydantic import Field

from .base_model import BaseModel
from .fragments import Settled


class MarkSendsStarted(BaseModel):
    mark_sends_started: "MarkSendsStartedMarkSendsStarted" = Field(
        alias="markSendsStarted"
    )


class MarkSendsStartedMarkSendsStarted(BaseModel):
    results: list["MarkSendsStartedMarkSendsStartedResults"]


class MarkSendsStartedMarkSendsStartedResults(BaseModel):
    applied: bool
    operation: Optional["MarkSendsStartedMarkSendsStartedResultsOperation"]


MarkSendsStartedMarkSendsStartedResultsOperation = Settled
MarkSendsStarted.model_rebuild()
MarkSendsStartedMarkSendsStarted.model_rebuild()
MarkSendsStartedMarkSendsStartedResults.model_rebuild()
