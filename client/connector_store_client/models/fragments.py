from typing import Any, Optional

from pydantic import Field

from .base_model import BaseModel
from .enums import OperationState


class LeasedOperation(BaseModel):
    caller_did: str = Field(alias="callerDID")
    operation_id: str = Field(alias="operationID")
    owner_did: str = Field(alias="ownerDID")
    connector_name: str = Field(alias="connectorName")
    model: str
    op: str
    account_key: str = Field(alias="accountKey")
    target: str
    source_id: str = Field(alias="sourceID")
    document_id: Optional[str] = Field(alias="documentID")
    deterministic_event_id: str = Field(alias="deterministicEventID")
    payload_hash: str = Field(alias="payloadHash")
    reissue_intent: Optional[Any] = Field(alias="reissueIntent")
    provider_etag: Optional[str] = Field(alias="providerEtag")
    attempts: int
    version: int
    send_marker: Optional[str] = Field(alias="sendMarker")
    lease_expires_at: Optional[int] = Field(alias="leaseExpiresAt")


class Settled(BaseModel):
    caller_did: str = Field(alias="callerDID")
    operation_id: str = Field(alias="operationID")
    state: OperationState
    version: int
    lease_token: Optional[str] = Field(alias="leaseToken")


LeasedOperation.model_rebuild()
Settled.model_rebuild()
