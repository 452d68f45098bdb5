"""The loglake view in the Airflow UI: an AirflowPlugin the api-server mounts at ``/loglake``.

A "loglake" entry in the UI's navigation embeds the page (``/plugin/loglake`` in the
UI); the app itself is ``loglake_airflow.ui``. Every Airflow process loads plugins,
so importing this file stays cheap: the FastAPI app (and FastAPI itself) is built on
the first request, and configuration is read per request.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin


class LazyApp:
    """An ASGI app that builds the real one on its first request."""

    def __init__(self, factory_path: str):
        self.factory_path = factory_path
        self._app = None

    async def __call__(self, scope, receive, send):
        if self._app is None:
            import importlib

            module, _, name = self.factory_path.partition(":")
            self._app = getattr(importlib.import_module(module), name)()
        await self._app(scope, receive, send)


class LoglakeViewPlugin(AirflowPlugin):
    name = "loglake"
    fastapi_apps = [{"name": "loglake", "app": LazyApp("loglake_airflow.ui:create_app"), "url_prefix": "/loglake"}]
    external_views = [{
        "name": "loglake",
        "href": "/loglake/",
        "destination": "nav",
        # A route of the UI's own: the page is embedded in it instead of opening a new tab.
        "url_route": "loglake",
        # Its own entry in the navigation bar, not one more item under "Browse".
        "nav_top_level": True,
        "icon": "/loglake/icon.svg",
    }]
