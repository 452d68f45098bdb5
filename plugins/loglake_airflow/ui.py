"""The loglake page of the Airflow UI: a FastAPI app the api-server mounts at ``/loglake``.

``/``            every dataset and partition, rendered on the server from ``loglake.ops.status``,
                 and charts of the last hours from the metrics series (``loglake.observe.charts``)
``/api/status``  the same data as JSON
``/docs/...``    the Great Expectations Data Docs site (``loglake.ledger.results.data_docs_dir``)
``/icon.svg``    the navigation icon

Configuration is loaded per request from the environment the api-server runs in
(LOGLAKE_CONF, LOGLAKE_HOME, LOGLAKE_PROFILE), never at import. Every route requires
a logged-in Airflow user, checked by Airflow's own ``get_user`` dependency (the UI's
``_token`` cookie or a Bearer token).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response

CHART_HOURS = 6.0  # the window the page's charts draw


async def require_user(request: Request):
    """The logged-in Airflow user, exactly as the REST API resolves it (401/403 otherwise)."""
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi.security import HTTPBearer

    # Imported here: the security module pulls in Airflow's ORM models, which only the
    # api-server needs, not every process that loads the plugin.
    return await get_user(request, None, await HTTPBearer(auto_error=False)(request))


def _load_config():
    from loglake.core.config import load_config

    return load_config()


def collect(config) -> list[dict]:
    """Per dataset, ``DatasetStatus.to_dict()``, or ``{"name", "topic", "error"}`` if it
    could not be read (Kafka down, say): one dataset's failure does not hide the others."""
    from loglake.core.errors import LoglakeError
    from loglake.ops.status import dataset_status

    out = []
    for ds in config.datasets.values():
        try:
            out.append(dataset_status(config, ds).to_dict())
        except (LoglakeError, OSError) as e:
            out.append({"name": ds.name, "topic": ds.topic, "error": str(e)})
        except Exception as e:  # confluent_kafka.KafkaException and kin: shown, never a 500 page
            out.append({"name": ds.name, "topic": ds.topic, "error": f"{type(e).__name__}: {e}"})
    return out


def create_app(config_loader: Callable | None = None, require_login: bool = True) -> FastAPI:
    """The loglake UI app. ``config_loader`` returns the Config (default: from the
    environment); ``require_login=False`` only for tests without an api-server."""
    load = config_loader or _load_config
    deps = [Depends(require_user)] if require_login else []
    app = FastAPI(title="loglake", dependencies=deps, docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/api/status")
    def status_json() -> JSONResponse:
        return JSONResponse({"datasets": collect(load())})

    @app.get("/", response_class=HTMLResponse)
    def page(request: Request) -> HTMLResponse:
        from loglake_airflow.ui_html import render_page

        from loglake.observe.charts import charts_html

        root = request.scope.get("root_path", "").rstrip("/")
        config = load()
        return HTMLResponse(render_page(collect(config), root,
                                        {name: charts_html(config, name, CHART_HOURS) for name in config.datasets}))

    @app.get("/icon.svg")
    def icon() -> Response:
        from loglake_airflow.ui_html import ICON

        return Response(ICON, media_type="image/svg+xml")

    @app.get("/docs")
    def data_docs_root(request: Request) -> RedirectResponse:
        # The site's links are relative: it must be served from a path ending in "/".
        return RedirectResponse(f"{request.scope.get('root_path', '').rstrip('/')}/docs/")

    @app.get("/docs/{path:path}")
    def data_docs(path: str = ""):
        from loglake.ledger.results import data_docs_dir
        from loglake_airflow.ui_html import no_docs_page

        site = Path(data_docs_dir(load())).resolve()
        if not (site / "index.html").is_file():
            return HTMLResponse(no_docs_page(site))
        target = (site / path).resolve()
        if not target.is_relative_to(site):
            raise HTTPException(404, f"{path!r} is outside the Data Docs site")
        if target.is_dir():
            target = target / "index.html"
        if not target.is_file():
            raise HTTPException(404, f"{path!r} is not in the Data Docs site")
        return FileResponse(target)

    return app
