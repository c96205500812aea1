"""The application UI, its REST API and event logs (driver side; reused by the history
server): status_store (an app's state, built from listener events only), event_log (write
and replay Spark's JSON-lines event logs), api (`/api/v1` over store providers), app_ui
(HTML pages and Prometheus text as functions of a store, plus aiohttp routes) and spark_ui
(the driver's live server)."""
