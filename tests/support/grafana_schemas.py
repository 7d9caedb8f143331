"""JSON Schemas (draft 2020-12) for the Grafana files this repo provisions: the subset of
Grafana's provisioning formats and dashboard model that the deployment relies on,
written from Grafana's file-provisioning documentation. Grafana itself is not
installable here, so these stand in for it: a typo in a key Grafana requires, a wrong
type, or a panel without a datasource fails validation."""

from __future__ import annotations

from typing import Any

UID = {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,40}$"}
DS_REF = {
    "type": "object",
    "required": ["type", "uid"],
    "properties": {"type": {"type": "string"}, "uid": UID},
}

DATASOURCES: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "datasources"],
    "properties": {
        "apiVersion": {"const": 1},
        "datasources": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["name", "uid", "type", "access", "url"],
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "uid": UID,
                    "type": {"type": "string"},
                    "access": {"enum": ["proxy", "direct"]},
                    "url": {"type": "string", "pattern": "^https?://"},
                    "isDefault": {"type": "boolean"},
                    "editable": {"type": "boolean"},
                    "jsonData": {"type": "object"},
                },
            },
        },
    },
}

DASHBOARD_PROVIDERS: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "providers"],
    "properties": {
        "apiVersion": {"const": 1},
        "providers": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["name", "type", "options"],
                "properties": {
                    "name": {"type": "string"},
                    "orgId": {"type": "integer"},
                    "folder": {"type": "string"},
                    "type": {"const": "file"},
                    "disableDeletion": {"type": "boolean"},
                    "allowUiUpdates": {"type": "boolean"},
                    "updateIntervalSeconds": {"type": "integer", "minimum": 1},
                    "options": {
                        "type": "object",
                        "required": ["path"],
                        "properties": {"path": {"type": "string", "pattern": "^/"}},
                    },
                },
            },
        },
    },
}

_PANEL: dict[str, Any] = {
    "type": "object",
    "required": ["id", "type", "title", "gridPos"],
    "properties": {
        "id": {"type": "integer", "minimum": 1},
        "type": {"type": "string"},
        "title": {"type": "string", "minLength": 1},
        "gridPos": {
            "type": "object",
            "required": ["x", "y", "w", "h"],
            "properties": {
                "x": {"type": "integer", "minimum": 0, "maximum": 23},
                "y": {"type": "integer", "minimum": 0},
                "w": {"type": "integer", "minimum": 1, "maximum": 24},
                "h": {"type": "integer", "minimum": 1},
            },
        },
        "datasource": DS_REF,
        "targets": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["refId", "expr", "datasource"],
                "properties": {
                    "refId": {"type": "string"},
                    "expr": {"type": "string", "minLength": 1},
                    "datasource": DS_REF,
                    "legendFormat": {"type": "string"},
                },
            },
        },
    },
    # a data panel (anything but a row) needs a datasource and at least one query
    "if": {"properties": {"type": {"not": {"const": "row"}}}},
    "then": {
        "required": ["datasource", "targets"],
        "properties": {"targets": {"minItems": 1}},
    },
}

# a template variable of type query: Grafana's model (name, its datasource, the query
# listing its values; with includeAll, the value "All" stands for)
_VARIABLE: dict[str, Any] = {
    "type": "object",
    "required": ["name", "type", "datasource", "query", "refresh"],
    "properties": {
        "name": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
        "type": {"const": "query"},
        "datasource": DS_REF,
        "query": {
            "type": "object",
            "required": ["query", "refId"],
            "properties": {"query": {"type": "string", "minLength": 1}},
        },
        "refresh": {"enum": [1, 2]},  # on load, on time range change
        "multi": {"type": "boolean"},
        "includeAll": {"type": "boolean"},
        "allValue": {"type": "string"},
    },
    "if": {"properties": {"includeAll": {"const": True}}, "required": ["includeAll"]},
    "then": {"required": ["allValue"]},
}

DASHBOARD: dict[str, Any] = {
    "type": "object",
    "required": ["uid", "title", "schemaVersion", "panels", "time"],
    "properties": {
        "templating": {
            "type": "object",
            "required": ["list"],
            "properties": {"list": {"type": "array", "items": _VARIABLE}},
        },
        "uid": UID,
        "title": {"type": "string", "minLength": 1},
        "schemaVersion": {"type": "integer", "minimum": 30},
        "refresh": {"type": "string"},
        "time": {
            "type": "object",
            "required": ["from", "to"],
        },
        "panels": {"type": "array", "minItems": 1, "items": _PANEL},
    },
}
