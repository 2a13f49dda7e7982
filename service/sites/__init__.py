"""Everything multi-site: services advertise themselves in ``heartbeats`` (``advertiser``), a gateway
reads the advertisements back (``registry``), lists what it found (``discovered_directory``,
``service_directory``) and fans queries out to the sites (``gateway``, ``site_selector`` for the REST
``site`` parameter, ``grafana_site_answers`` for Grafana's payload ``site``)."""
