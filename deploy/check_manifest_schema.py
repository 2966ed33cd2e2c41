"""Checks the Kubernetes manifests against the Kubernetes API schema, offline: every field
of every document must be a field of its object in the API (no misspelt or misplaced key is
silently dropped by the API server), of the right type (object, list, map, string, integer,
boolean, quantity), and every field the API requires must be there. The schema is the API
models of Debian's python3-kubernetes (Kubernetes 1.22), plus the fields Kubernetes added
since that these manifests use (NEWER_FIELDS, each named with its version). Not covered:
value constraints the API server checks beyond types (enums, ranges, name formats) and
admission policies.

    check_manifest_schema.py REPO_ROOT
"""
import glob
import os
import re
import sys

import yaml
from kubernetes import client

ROOT = sys.argv[1] if len(sys.argv) > 1 else "."

KINDS = {
    ("v1", "Pod"): "V1Pod",
    ("v1", "Service"): "V1Service",
    ("v1", "ConfigMap"): "V1ConfigMap",
    ("v1", "Secret"): "V1Secret",
    ("apps/v1", "Deployment"): "V1Deployment",
    ("apps/v1", "DaemonSet"): "V1DaemonSet",
}

# Fields added to the API after python3-kubernetes 22.6 (Kubernetes 1.22): (model, field) ->
# (type in the models' notation, the Kubernetes version that added it).
NEWER_FIELDS = {
    ("V1Probe", "grpc"): ("V1GRPCAction", "1.24"),
    ("V1Container", "restartPolicy"): ("str", "1.28: native sidecars, init containers only"),
}
# The models of the newer fields' own types.
NEWER_MODELS = {
    "V1GRPCAction": ({"port": "int", "service": "str"}, {"port"}),
}

# Fields the API requires, beyond what the models say (the 1.22 models mark few).
REQUIRED = {
    "V1Container": {"name"},
    "V1Volume": {"name"},
    "V1EnvVar": {"name"},
    "V1ContainerPort": {"containerPort"},
    "V1ServicePort": {"port"},
    "V1Toleration": set(),
    "V1KeyToPath": {"key", "path"},
}


def model_fields(model):
    """The JSON field name -> type of a model class name, and its required fields."""
    if model in NEWER_MODELS:
        return NEWER_MODELS[model]
    cls = getattr(client, model)
    fields = {cls.attribute_map[attr]: kind for attr, kind in cls.openapi_types.items()}
    for (owner, field), (kind, _) in NEWER_FIELDS.items():
        if owner == model:
            fields[field] = kind
    return fields, REQUIRED.get(model, set())


def check(value, kind, path, errors):
    """Appends to `errors` what in `value` does not fit `kind` (the models' type notation)."""
    list_of = re.fullmatch(r"list\[(.+)\]", kind)
    map_of = re.fullmatch(r"dict\(str, (.+)\)", kind)
    if list_of:
        if not isinstance(value, list):
            errors.append(f"{path}: a list, not {type(value).__name__}")
            return
        for i, item in enumerate(value):
            check(item, list_of.group(1), f"{path}[{i}]", errors)
    elif map_of:
        if not isinstance(value, dict):
            errors.append(f"{path}: a map, not {type(value).__name__}")
            return
        for key, item in value.items():
            check(item, map_of.group(1), f"{path}.{key}", errors)
    elif kind == "str":
        # Quantities and int-or-string fields are strings in the models.
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            errors.append(f"{path}: a string, not {type(value).__name__}")
    elif kind == "int":
        if not isinstance(value, int) or isinstance(value, bool):
            errors.append(f"{path}: an integer, not {type(value).__name__}")
    elif kind == "bool":
        if not isinstance(value, bool):
            errors.append(f"{path}: a boolean, not {type(value).__name__}")
    elif kind in ("object", "float", "datetime"):
        pass  # free-form (int-or-string ports, quantities), or not used here
    else:
        if not isinstance(value, dict):
            errors.append(f"{path}: an object ({kind}), not {type(value).__name__}")
            return
        fields, required = model_fields(kind)
        for key, item in value.items():
            if key not in fields:
                errors.append(f"{path}.{key}: no such field in {kind}")
            else:
                check(item, fields[key], f"{path}.{key}", errors)
        for key in sorted(required - set(value)):
            errors.append(f"{path}: {kind} requires {key}")


def sidecar_rules(document, path, errors):
    """restartPolicy on a container is for init containers (native sidecars) only, and
    only Always."""
    spec = document.get("spec", {})
    if document["kind"] in ("Deployment", "DaemonSet"):
        spec = spec.get("template", {}).get("spec", {})
    for container in spec.get("containers", []):
        if "restartPolicy" in container:
            errors.append(f"{path}: container {container.get('name')}: restartPolicy is for "
                          f"init containers only")
    for container in spec.get("initContainers", []):
        if container.get("restartPolicy", "Always") != "Always":
            errors.append(f"{path}: init container {container.get('name')}: restartPolicy "
                          f"may only be Always")


def main():
    errors, checked = [], 0
    for path in sorted(glob.glob(os.path.join(ROOT, "deploy/kubernetes/*.yaml"))):
        with open(path) as f:
            for i, document in enumerate(yaml.safe_load_all(f)):
                if document is None:
                    continue
                where = f"{os.path.basename(path)}#{i} {document.get('kind')}"
                model = KINDS.get((document.get("apiVersion"), document.get("kind")))
                if model is None:
                    errors.append(f"{where}: no schema here for {document.get('apiVersion')} "
                                  f"{document.get('kind')}")
                    continue
                check(document, model, where, errors)
                sidecar_rules(document, where, errors)
                checked += 1
    for error in errors:
        print(error, file=sys.stderr)
    if errors or checked < 5:
        print(f"{len(errors)} schema errors in {checked} documents", file=sys.stderr)
        return 1
    print(f"{checked} Kubernetes documents match the API schema (1.22 models plus "
          f"{len(NEWER_FIELDS)} newer fields)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
