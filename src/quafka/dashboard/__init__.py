"""quafka's web dashboard (issue 30; docs/dashboard.md): a client of the broker, over quafka.client only."""
