"""Multi-site discovery: services advertise themselves in ``heartbeats``, gateways read them back.

``advertisement`` owns the record format, ``advertiser`` writes it periodically, ``registry`` keeps the
live services a gateway may call (``service.gateway`` does the calling).
"""
