"""quafka's web dashboard (issue 30; docs/dashboard.md): a client of the broker, over quafka.client only.
Served by the broker process (``quafka.dashboard.listener``) or standalone (``quafka dashboard``). Starlette,
uvicorn and Jinja2 are imported only when a dashboard starts."""

__all__ = ["DashboardServer", "DashboardSettings", "create_app"]


def __getattr__(name: str):
    if name == "DashboardServer":
        from .server import DashboardServer

        return DashboardServer
    if name == "DashboardSettings":
        from .settings import DashboardSettings

        return DashboardSettings
    if name == "create_app":
        from .app import create_app

        return create_app
    raise AttributeError(name)
