"""The Kubernetes manifests under ``k8s/`` stay consistent with the code (no cluster needed).

There is no API server here, so a small renderer below applies what the kustomizations use
(resources, components, strategic-merge patches by kind and name, ``replicas``, ConfigMap and
Secret generators) and the checks run on each overlay's result: every ``DYNBRANCH_<SVC>_*``
variable is a real setting of that service and the values load, probes hit the gRPC port, grace
periods cover drain + grace, Services reach real container ports, the gateway's engine list
names every engine pod, and the gpu overlay asks for GPUs. When ``kubectl`` is installed, its
own ``kubectl kustomize`` output is compared with the renderer's.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from services.admission.config import AdmissionSettings
from services.common.config import ServiceSettings, load_settings
from services.csl.config import CslSettings
from services.delivery.config import DeliverySettings
from services.engine_agent.config import EngineAgentSettings
from services.gateway.config import GatewaySettings

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "k8s"
OVERLAYS = ("cpu-sim", "gpu")
WORKLOADS = ("Deployment", "StatefulSet")
#: ``python -m <module>`` → the settings class that module loads.
SETTINGS: dict[str, type[ServiceSettings]] = {
    "services.gateway": GatewaySettings, "services.engine_agent": EngineAgentSettings,
    "services.csl": CslSettings, "services.admission": AdmissionSettings,
    "services.delivery": DeliverySettings,
}
#: Strategic-merge keys of the lists our patches touch; any other list is replaced.
MERGE_KEYS = {"containers": "name", "initContainers": "name", "env": "name", "volumes": "name",
              "volumeMounts": "mountPath", "ports": "containerPort"}
SAMPLE_API_KEYS = '{"test-key": "test-tenant"}'
DATA_FIELD = {"ConfigMap": "data", "Secret": "stringData"}

Doc = dict[str, Any]


# ---- a small kustomize ------------------------------------------------------------------------

def load_docs(path: Path) -> list[Doc]:
    """Every non-empty YAML document of ``path``."""
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def kustomization(folder: Path) -> Doc:
    """The kustomization file of ``folder``."""
    return load_docs(folder / "kustomization.yaml")[0]


def merge(base: Any, patch: Any, key: str = "") -> Any:
    """Strategic merge of ``patch`` into ``base`` (maps merge, keyed lists merge, others
    replace)."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            out[k] = merge(base[k], v, k) if k in base else copy.deepcopy(v)
        return out
    if isinstance(base, list) and isinstance(patch, list) and key in MERGE_KEYS:
        field, out = MERGE_KEYS[key], [copy.deepcopy(b) for b in base]
        index, added = {item[field]: i for i, item in enumerate(out)}, []
        for item in patch:
            if item[field] in index:
                out[index[item[field]]] = merge(out[index[item[field]]], item)
            else:
                added.append(copy.deepcopy(item))
        return added + out  # kustomize puts new entries first
    return copy.deepcopy(patch)


def find(docs: list[Doc], kind: str, name: str) -> Doc:
    """The document of ``kind`` named ``name``."""
    matches = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind}/{name}, found {len(matches)}"
    return matches[0]


def generate(docs: list[Doc], spec: Doc, kind: str) -> None:
    """Apply one configMapGenerator / secretGenerator entry (literals only; a Secret's values
    stay in plain text under ``stringData`` where kustomize writes base64 ``data``)."""
    data, field = dict(i.split("=", 1) for i in spec.get("literals", [])), DATA_FIELD[kind]
    if spec.get("behavior") == "merge":
        find(docs, kind, spec["name"]).setdefault(field, {}).update(data)
    else:
        docs.append({"apiVersion": "v1", "kind": kind, "metadata": {"name": spec["name"]},
                     field: data})


def render(folder: Path) -> list[Doc]:
    """The documents ``kubectl kustomize folder`` would emit (names without hash suffixes)."""
    k, docs = kustomization(folder), []
    for entry in k.get("resources", []):
        path = folder / entry
        docs += render(path) if path.is_dir() else load_docs(path)
    for entry in k.get("components", []):
        docs = apply_layer(folder / entry, kustomization(folder / entry), docs)
    return apply_layer(folder, k, docs)


def apply_layer(folder: Path, k: Doc, docs: list[Doc]) -> list[Doc]:
    """Generators, patches, replicas and namespace of one kustomization over ``docs``."""
    for spec in k.get("configMapGenerator", []):
        generate(docs, spec, "ConfigMap")
    for spec in k.get("secretGenerator", []):
        generate(docs, spec, "Secret")
    for entry in k.get("patches", []):
        for patch in load_docs(folder / entry["path"]):
            target = find(docs, patch["kind"], patch["metadata"]["name"])
            docs[docs.index(target)] = merge(target, patch)
    for entry in k.get("images", []):
        set_image(docs, entry)
    for entry in k.get("replicas", []):
        find_workload(docs, entry["name"])["spec"]["replicas"] = entry["count"]
    if "namespace" in k:
        for doc in docs:
            if doc["kind"] != "Namespace":
                doc["metadata"]["namespace"] = k["namespace"]
    return docs


def set_image(docs: list[Doc], entry: Doc) -> None:
    """The ``images`` transformer: a new name and tag for every container using ``name``."""
    for c in (c for w in workloads(docs) for c in w["spec"]["template"]["spec"]["containers"]):
        if c["image"].split(":")[0] == entry["name"]:
            c["image"] = f"{entry.get('newName', entry['name'])}:{entry['newTag']}"


def find_workload(docs: list[Doc], name: str) -> Doc:
    """The Deployment or StatefulSet named ``name``."""
    matches = [d for d in docs if d["kind"] in WORKLOADS and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one workload {name}, found {len(matches)}"
    return matches[0]


# ---- helpers over rendered documents ---------------------------------------------------------

def workloads(docs: list[Doc]) -> Iterator[Doc]:
    """Deployments and StatefulSets."""
    return (d for d in docs if d["kind"] in WORKLOADS)


def containers(docs: list[Doc]) -> Iterator[tuple[Doc, Doc]]:
    """(workload, container) pairs."""
    for w in workloads(docs):
        for c in w["spec"]["template"]["spec"]["containers"]:
            yield w, c


def module_of(container: Doc) -> str:
    """The service module a container runs (``python -m <module>``)."""
    command = container["command"]
    assert command[:2] == ["python", "-m"] and len(command) == 3, command
    return command[2]


def settings_class(container: Doc) -> type[ServiceSettings]:
    """The settings class of the service a container runs."""
    return SETTINGS[module_of(container)]


def data_of(docs: list[Doc], kind: str, name: str, key: str) -> str | None:
    """``data[key]`` of a ConfigMap or Secret in the build, or None when there is none."""
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found[0].get(DATA_FIELD[kind], {}).get(key) if found else None


def resolve(docs: list[Doc], item: Doc) -> str | None:
    """The value one env entry has in a pod (None: the variable is not set)."""
    if "value" in item:
        return str(item["value"])
    source = item["valueFrom"]
    if "fieldRef" in source:
        return "dynbranch-pod-0"
    if "configMapKeyRef" in source:
        ref = source["configMapKeyRef"]
        value = data_of(docs, "ConfigMap", ref["name"], ref["key"])
        assert value is not None or ref.get("optional"), f"no ConfigMap {ref['name']}"
        return value
    ref = source["secretKeyRef"]
    # Secrets the overlay does not generate are created out of band (gpu): use a sample value.
    return data_of(docs, "Secret", ref["name"], ref["key"]) or SAMPLE_API_KEYS


def environ(docs: list[Doc], container: Doc) -> dict[str, str]:
    """The container's environment as the process sees it."""
    values = {e["name"]: resolve(docs, e) for e in container.get("env", [])}
    return {k: v for k, v in values.items() if v is not None}


def settings_of(docs: list[Doc], container: Doc) -> ServiceSettings:
    """The settings the container's service would start with."""
    return load_settings(settings_class(container), environ=environ(docs, container))


def port_named(container: Doc, name: str) -> int:
    """The container port called ``name``."""
    return next(p["containerPort"] for p in container["ports"] if p["name"] == name)


@pytest.fixture(scope="module")
def builds() -> dict[str, list[Doc]]:
    """Each overlay's rendered documents."""
    return {name: render(K8S / "overlays" / name) for name in OVERLAYS}


def all_builds_containers(builds: dict[str, list[Doc]]
                          ) -> Iterator[tuple[str, list[Doc], Doc, Doc]]:
    """(overlay, its documents, workload, container) over every overlay."""
    for overlay, docs in builds.items():
        for w, c in containers(docs):
            yield overlay, docs, w, c


# ---- files and kustomizations ----------------------------------------------------------------

def kustomization_dirs() -> list[Path]:
    return sorted(p.parent for p in K8S.rglob("kustomization.yaml"))


def test_every_yaml_file_parses_into_kubernetes_objects() -> None:
    files = sorted(K8S.rglob("*.yaml"))
    assert files
    for path in files:
        for doc in load_docs(path):
            assert isinstance(doc, dict) and doc.get("apiVersion") and doc.get("kind"), path


def test_kustomization_paths_exist_and_no_manifest_is_orphaned() -> None:
    used: set[Path] = set()
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

def test_containers_run_real_service_modules(builds: dict[str, list[Doc]]) -> None:
    for overlay, _docs, w, c in all_builds_containers(builds):
        assert importlib.util.find_spec(module_of(c)) is not None, (overlay, w["metadata"]["name"])
        assert module_of(c) in SETTINGS


def test_env_names_are_settings_of_the_service_they_configure(builds: dict[str, list[Doc]]
                                                              ) -> None:
    for overlay, _docs, w, c in all_builds_containers(builds):
        cls = settings_class(c)
        for item in c.get("env", []):
            name = item["name"]
            if not name.startswith("DYNBRANCH_"):
                continue
            where = f"{overlay}: {w['metadata']['name']}: {name}"
            assert name.startswith(cls.env_prefix), f"{where}: not {cls.env_prefix}*"
            key = name[len(cls.env_prefix):].lower()
            assert key == "config" or key in cls.model_fields, f"{where}: no such setting"


def test_every_service_loads_its_settings_from_the_manifest_env(builds: dict[str, list[Doc]]
                                                                ) -> None:
    for _overlay, docs, _w, c in all_builds_containers(builds):
        settings = settings_of(docs, c)
        assert settings.host == "0.0.0.0"  # probes and peers reach the pod IP
        assert settings.port == port_named(c, "grpc")
        assert settings.metrics_port == port_named(c, "metrics")


def test_pods_disable_service_links(builds: dict[str, list[Doc]]) -> None:
    # Service links would inject DYNBRANCH_CSL_SERVICE_HOST etc.: unknown settings stop start-up.
    for docs in builds.values():
        for w in workloads(docs):
            assert w["spec"]["template"]["spec"].get("enableServiceLinks") is False


# ---- probes, resources, shutdown, security ------------------------------------------------------

def test_every_container_has_grpc_probes_and_resources(builds: dict[str, list[Doc]]) -> None:
    for overlay, _docs, w, c in all_builds_containers(builds):
        where = (overlay, w["metadata"]["name"])
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert c[probe]["grpc"]["port"] == port_named(c, "grpc"), (where, probe)
        for bound in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(c["resources"][bound]), (where, bound)


def test_grace_period_covers_drain_and_grace(builds: dict[str, list[Doc]]) -> None:
    for _overlay, docs, w, c in all_builds_containers(builds):
        s = settings_of(docs, c)
        # The gateway's HTTP front waits up to grace_s again, after the gRPC server stopped.
        stops = 2 if isinstance(s, GatewaySettings) and s.http_port >= 0 else 1
        needed = s.drain_delay_s + stops * s.grace_s
        assert s.drain_delay_s > 0, w["metadata"]["name"]
        assert w["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > needed, \
            w["metadata"]["name"]


def test_pods_run_as_non_root_with_a_writable_tmp(builds: dict[str, list[Doc]]) -> None:
    for _overlay, _docs, w, c in all_builds_containers(builds):
        pod = w["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True  # and the rest of "restricted":
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
        assert not any("hostPath" in v for v in pod["volumes"])
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
        assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
        tmp = next(m for m in c["volumeMounts"] if m["mountPath"] == "/tmp")
        assert "emptyDir" in next(v for v in pod["volumes"] if v["name"] == tmp["name"])


def test_read_only_root_everywhere_but_the_vllm_engine(builds: dict[str, list[Doc]]) -> None:
    for overlay, docs, w, c in all_builds_containers(builds):
        vllm = module_of(c) == "services.engine_agent" and settings_of(docs, c).backend == "vllm"
        assert c["securityContext"]["readOnlyRootFilesystem"] is (not vllm), (overlay, w)


def test_prometheus_annotations_name_the_metrics_port(builds: dict[str, list[Doc]]) -> None:
    for _overlay, _docs, w, c in all_builds_containers(builds):
        notes = w["spec"]["template"]["metadata"]["annotations"]
        assert notes["prometheus.io/scrape"] == "true"
        assert int(notes["prometheus.io/port"]) == port_named(c, "metrics")


# ---- wiring -------------------------------------------------------------------------------------

def pod_labels(w: Doc) -> dict[str, str]:
    return w["spec"]["template"]["metadata"]["labels"]


def test_services_select_pods_and_reach_their_ports(builds: dict[str, list[Doc]]) -> None:
    for overlay, docs in builds.items():
        for svc in (d for d in docs if d["kind"] == "Service"):
            selector = svc["spec"]["selector"].items()
            chosen = [w for w in workloads(docs) if selector <= pod_labels(w).items()]
            assert len(chosen) == 1, (overlay, svc["metadata"]["name"])
            ports = chosen[0]["spec"]["template"]["spec"]["containers"][0]["ports"]
            for port in svc["spec"]["ports"]:
                target = port.get("targetPort", port["port"])
                match = [p for p in ports if target in (p["name"], p["containerPort"])]
                assert match and match[0]["containerPort"] == port["port"], (overlay, port)


def test_workload_selectors_match_their_pod_labels(builds: dict[str, list[Doc]]) -> None:
    for docs in builds.values():
        for w in workloads(docs):
            assert w["spec"]["selector"]["matchLabels"].items() <= pod_labels(w).items()


def gateway(docs: list[Doc]) -> tuple[Doc, GatewaySettings]:
    w = find_workload(docs, "dynbranch-gateway")
    c = w["spec"]["template"]["spec"]["containers"][0]
    s = settings_of(docs, c)
    assert isinstance(s, GatewaySettings)
    return c, s


def test_gateway_engine_list_names_every_engine_pod(builds: dict[str, list[Doc]]) -> None:
    for overlay, docs in builds.items():
        _c, s = gateway(docs)
        sts = find(docs, "StatefulSet", "dynbranch-engine")
        svc = find(docs, "Service", sts["spec"]["serviceName"])
        assert svc["spec"]["clusterIP"] == "None", "engine pod DNS names need a headless Service"
        port = next(p["port"] for p in svc["spec"]["ports"] if p["name"] == "grpc")
        expected = [f"{sts['metadata']['name']}-{i}.{svc['metadata']['name']}:{port}"
                    for i in range(sts["spec"]["replicas"])]
        assert s.engines == expected, overlay


def test_delivery_names_every_engine_pod_by_its_engine_id(builds: dict[str, list[Doc]]
                                                         ) -> None:
    for overlay, docs in builds.items():
        _c, gw = gateway(docs)
        w = find_workload(docs, "dynbranch-delivery")
        s = settings_of(docs, w["spec"]["template"]["spec"]["containers"][0])
        # engine id = pod name (DYNBRANCH_ENGINE_ENGINE_ID comes from metadata.name)
        expected = {addr.split(".")[0]: addr for addr in gw.engines}
        assert s.engine_targets == expected, overlay  # type: ignore[attr-defined]


def test_gateway_targets_name_services_of_the_mesh(builds: dict[str, list[Doc]]) -> None:
    for docs in builds.values():
        _c, s = gateway(docs)
        for target in (s.csl, s.admission, s.delivery):
            host, port = target.rsplit(":", 1)
            svc = find(docs, "Service", host)
            assert int(port) in [p["port"] for p in svc["spec"]["ports"]]


def test_gateway_serves_http_and_requires_api_keys(builds: dict[str, list[Doc]]) -> None:
    for docs in builds.values():
        c, s = gateway(docs)
        assert s.auth and s.http_port == port_named(c, "http")
        keys = next(e for e in c["env"] if e["name"] == "DYNBRANCH_GATEWAY_API_KEYS")
        assert "secretKeyRef" in keys["valueFrom"]
        assert json.loads(resolve(docs, keys) or "")  # JSON object: key → tenant


def test_csl_is_one_statefulset_replica_with_its_store_on_the_volume(
        builds: dict[str, list[Doc]]) -> None:
    for docs in builds.values():
        sts = find(docs, "StatefulSet", "dynbranch-csl")
        assert sts["spec"]["replicas"] == 1
        c = sts["spec"]["template"]["spec"]["containers"][0]
        claim = sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"]
        mount = next(m["mountPath"] for m in c["volumeMounts"] if m["name"] == claim)
        data_dir = Path(settings_of(docs, c).data_dir)
        assert Path(mount) in data_dir.parents  # below the mount point: lost+found is not ours


# ---- overlays -------------------------------------------------------------------------------

def engine(docs: list[Doc]) -> tuple[Doc, Doc, EngineAgentSettings]:
    sts = find(docs, "StatefulSet", "dynbranch-engine")
    c = sts["spec"]["template"]["spec"]["containers"][0]
    s = settings_of(docs, c)
    assert isinstance(s, EngineAgentSettings)
    return sts["spec"]["template"]["spec"], c, s


def test_cpu_sim_overlay_runs_simulated_engines_without_gpus(builds: dict[str, list[Doc]]
                                                             ) -> None:
    _pod, _c, s = engine(builds["cpu-sim"])
    assert (s.backend, s.preset) == ("sim", "qwen3-32b-h200")
    for _w, c in containers(builds["cpu-sim"]):
        assert "nvidia.com/gpu" not in c["resources"]["limits"]


def test_gpu_overlay_puts_vllm_engines_on_gpu_nodes(builds: dict[str, list[Doc]]) -> None:
    pod, c, s = engine(builds["gpu"])
    assert s.backend == "vllm" and s.model_path
    gpu = "nvidia.com/gpu"
    assert c["resources"]["requests"][gpu] == c["resources"]["limits"][gpu] == 1
    assert any(t["key"] == "nvidia.com/gpu" for t in pod["tolerations"])
    assert pod["nodeSelector"]
    shm = next(m["name"] for m in c["volumeMounts"] if m["mountPath"] == "/dev/shm")
    assert next(v for v in pod["volumes"] if v["name"] == shm)["emptyDir"]["medium"] == "Memory"
    models = next(m for m in c["volumeMounts"] if s.model_path.startswith(m["mountPath"]))
    assert models["readOnly"] is True
    probe = c["startupProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] >= 20 * 60  # weights take a while


def test_dockerfile_installs_the_project_and_runs_as_non_root() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert "python:3.11-slim" in text and "pip install \".${EXTRAS:+[$EXTRAS]}\"" in text
    user = [line.split()[1] for line in text.splitlines() if line.startswith("USER ")]
    assert user and user[-1].split(":")[0] not in ("0", "root")


# ---- the real kustomize, when it is installed ----------------------------------------------

def normalized(pod: Doc, generated: set[str]) -> Doc:
    """A pod spec with generator hash suffixes removed and keyed lists sorted."""
    pod = copy.deepcopy(pod)
    for c in pod["containers"]:
        for item in c.get("env", []):
            for ref in item.get("valueFrom", {}).values():
                if "name" in ref:
                    ref["name"] = strip_hash(ref["name"], generated)
        for field, key in MERGE_KEYS.items():
            if field in c:
                c[field] = sorted(c[field], key=lambda x, k=key: x[k])
    pod["volumes"] = sorted(pod.get("volumes", []), key=lambda v: v["name"])
    return pod


def strip_hash(name: str, generated: set[str]) -> str:
    """``name`` without kustomize's content-hash suffix when it names a generated object."""
    base = name.rsplit("-", 1)[0]
    return base if base in generated else name


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_renderer_agrees_with_kubectl_kustomize(overlay: str, builds: dict[str, list[Doc]]
                                                ) -> None:
    out = subprocess.run(["kubectl", "kustomize", str(K8S / "overlays" / overlay)],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    theirs, ours = [d for d in yaml.safe_load_all(out) if d], builds[overlay]
    generated = {d["metadata"]["name"] for d in ours if d["kind"] in ("ConfigMap", "Secret")}

    def key(d: Doc) -> tuple[str, str]:
        return d["kind"], strip_hash(d["metadata"]["name"], generated)

    assert sorted(map(key, theirs)) == sorted(map(key, ours))
    for w in workloads(theirs):
        mine = find_workload(ours, w["metadata"]["name"])
        assert w["spec"].get("replicas") == mine["spec"].get("replicas")
        assert (normalized(w["spec"]["template"]["spec"], generated)
                == normalized(mine["spec"]["template"]["spec"], generated)), w["metadata"]["name"]
    for cm in (d for d in theirs if d["kind"] == "ConfigMap"):
        assert cm["data"] == find(ours, "ConfigMap", key(cm)[1])["data"]
