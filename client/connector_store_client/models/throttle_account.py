from typing import Optional

from pydantic import Field

from .base_model import BaseModel


class ThrottleAccount(BaseModel):
    throttle_account: "ThrottleAccountThrottleAccount" = Field(alias="throttleAccount")


class ThrottleAccountThrottleAccount(BaseModel):
    account: "ThrottleAccountThrottleAccountAccount"


class ThrottleAccountThrottleAccountAccount(BaseModel):
    connector_name: str = Field(alias="connectorName")
    account_key: str = Field(alias="accountKey")
    throttled_until: Optional[int] = Field(alias="throttledUntil")


ThrottleAccount.model_rebuild()
ThrottleAccountThrottleAccount.model_rebuild()
