"""`/v2/services`: the SRM services (sites) this one knows; itself until discovery provides more."""

from __future__ import annotations

from flask import current_app
from flask.views import MethodView

from service.api.services.schemas import ServiceListSchema
from service.extensions import Blueprint
from service.sites.service_directory import SERVICES_KEY
from service.sites.site_selector import site_selectable

blp = Blueprint("services", __name__, url_prefix="/v2", description="Discovered SRM services (sites)")


@blp.route("/services")
class Services(MethodView):
    @site_selectable(blp, ServiceListSchema)
    def get(self) -> dict:
        """Every known SRM service with its advertised address and status."""
        return {"services": current_app.extensions[SERVICES_KEY].services()}
