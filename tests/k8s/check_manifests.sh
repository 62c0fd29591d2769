#!/usr/bin/env bash
# Static checks of psync's Kubernetes manifests and Containerfiles, no
# cluster needed:
#   - kustomize renders the base and every overlay under deploy/k8s/overlays;
#   - kubernetes-validate --strict accepts every rendered overlay for
#     Kubernetes 1.27, 1.30 and the newest version it bundles;
#   - checkov passes on every rendered overlay, and every check it skips
#     (a checkov.io/skipN annotation) says why;
#   - hadolint passes on every deploy/image/Containerfile*;
#   - yamllint passes on deploy/k8s (settings: .yamllint);
#   - in every rendering, each --num_servers= flag equals the StatefulSet's
#     replicas and each --num_workers= flag the Job's completions and
#     parallelism, also in an overlay made here that changes both counts; in
#     an elastic job (cluster.min_workers in the ConfigMap's job.pbtxt) the
#     parallelism is min_workers..completions instead and max_workers, if
#     given, equals completions (an elastic rendering made here with other
#     completions is refused);
#   - in every rendering, no NetworkPolicy lets DNS (port 53) out to any
#     address: an egress rule that can reach port 53 names only the
#     cluster's DNS pods (namespace kube-system, k8s-app: kube-dns), and
#     some rule does, or the pods could not resolve the servers; a policy
#     made here with an any-address rule for port 53 is refused;
#   - each role holds only its own credentials: in every rendering no
#     worker pod mounts a servers' Secret or names --server_token_file, and
#     servers given a token are given --server_token_file too (a rendering
#     made here with the servers' Secret in the workers is refused);
#     deploy/k8s/tools/make_security_secret.sh prints one Secret per role,
#     the workers' without the servers' key or token, and the Secrets the
#     secure-demo overlay mounts are those.
# Prints "PASS name" / "FAIL name" per check (what failed goes to stderr,
# indented) and exits non-zero if one failed. Every command runs under
# `timeout`; with the tools installed the whole takes well under a minute.
# The tools are found on PATH, else in the venv deploy/bootstrap_tools.sh
# makes: ${PSYNC_TOOLS_DIR:-$HOME/.cache/psync/tools}/bin.
set -uo pipefail
cd "$(dirname "$0")/../.."

tools_bin="${PSYNC_TOOLS_DIR:-$HOME/.cache/psync/tools}/bin"
work=$(mktemp -d /tmp/psync_check_manifests.XXXXXX)
trap 'rm -rf "$work"' EXIT
failed=0

pass() { echo "PASS $1"; }
fail() {  # NAME [DETAIL FILE]
  echo "FAIL $1"
  failed=1
  if [[ -n "${2:-}" && -s "$2" ]]; then tail -n 25 "$2" | sed 's/^/    /' >&2; fi
}
# NAME SECONDS COMMAND...: runs it under timeout; PASS if it exits 0.
check() {
  local name=$1 seconds=$2; shift 2
  if timeout "$seconds" "$@" >"$work/out" 2>&1; then
    pass "$name"
  else
    local rc=$?
    (( rc == 124 )) && echo "timed out after $seconds s" >>"$work/out"
    fail "$name" "$work/out"
  fi
}
# The tool's path: on PATH, else in the venv; empty if neither.
find_tool() {
  if command -v "$1" >/dev/null 2>&1; then
    command -v "$1"
  elif [[ -x "$tools_bin/$1" ]]; then
    echo "$tools_bin/$1"
  fi
}

declare -A tool
for t in kubectl kubernetes-validate checkov hadolint yamllint; do
  tool[$t]=$(find_tool "$t")
  if [[ -z "${tool[$t]}" ]]; then
    echo "$t is neither on PATH nor in $tools_bin: run deploy/bootstrap_tools.sh" >"$work/out"
    fail "tool $t found" "$work/out"
  fi
done
# A Python with PyYAML for the count check: PATH's, the venv's (checkov and
# yamllint bring PyYAML), or Debian's.
python=
for p in "$(command -v python3)" "$tools_bin/python3" /usr/bin/python3; do
  if [[ -x "$p" ]] && "$p" -c 'import yaml' 2>/dev/null; then python=$p; break; fi
done
[[ -n "$python" ]] || { echo "no python3 with PyYAML" >"$work/out"; fail "python3 with PyYAML found" "$work/out"; }

# Counts agree in a rendering: every --num_servers= equals the StatefulSet's
# replicas, every --num_workers= the Job's completions and, in a fixed job,
# parallelism; an elastic job's (cluster.min_workers > 0 in the ConfigMap)
# parallelism is its scale, min_workers..completions, and its max_workers
# is completions.
cat >"$work/counts.py" <<'EOF'
import re
import sys
import yaml

docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
sts = [d for d in docs if d["kind"] == "StatefulSet"]
jobs = [d for d in docs if d["kind"] == "Job"]
if len(sts) != 1 or len(jobs) != 1:
    sys.exit(f"expected one StatefulSet and one Job, found {len(sts)} and {len(jobs)}")
servers = sts[0]["spec"].get("replicas", 1)
job = jobs[0]["spec"]
workers = job.get("completions", 1)
errors = []


def cluster_field(name):
    """cluster.<name> in the ConfigMaps' job files (0: not set)."""
    for d in docs:
        for text in (d.get("data") or {}).values() if d["kind"] == "ConfigMap" else ():
            found = re.search(r"(?ms)^cluster \{.*?^\s*" + name + r":\s*(\d+)", text)
            if found:
                return int(found.group(1))
    return 0


min_workers, max_workers = cluster_field("min_workers"), cluster_field("max_workers")
parallelism = job.get("parallelism", 1)
if min_workers == 0 and parallelism != workers:
    errors.append(f"Job parallelism {parallelism} != completions {workers}")
if min_workers > 0 and not min_workers <= parallelism <= workers:
    errors.append(f"Job parallelism {parallelism}, expected min_workers..completions "
                  f"({min_workers}..{workers}) in an elastic job")
if max_workers not in (0, workers):
    errors.append(f"job.pbtxt max_workers {max_workers} != completions {workers}")
for doc in sts + jobs:
    for c in doc["spec"]["template"]["spec"]["containers"]:
        args = c.get("args", [])
        for flag, want in (("--num_servers=", servers), ("--num_workers=", workers)):
            values = [a[len(flag):] for a in args if a.startswith(flag)]
            if not values:
                errors.append(f"{doc['kind']} {c['name']}: no {flag} flag")
            for v in values:
                if v != str(want):
                    errors.append(f"{doc['kind']} {c['name']}: {flag}{v}, expected {want}")
if errors:
    sys.exit("\n".join(errors))
elastic = f" (elastic: {min_workers}..{workers}, {parallelism} to start)" if min_workers else ""
print(f"{servers} servers, {workers} workers{elastic}")
EOF

# DNS egress goes only to the cluster's DNS pods. A rule without "to"
# reaches every address, one without "ports" every port; a named port (a
# string) may be "dns", so it counts as 53.
cat >"$work/dns_egress.py" <<'EOF'
import sys
import yaml

DNS_NAMESPACE = {"kubernetes.io/metadata.name": "kube-system"}
DNS_PODS = {"k8s-app": "kube-dns"}
EXPECTED = "expected only the DNS pods (namespace kube-system, k8s-app: kube-dns)"


def reaches_53(port):
    number = port.get("port")
    if number is None or isinstance(number, str):
        return True
    return number <= 53 <= port.get("endPort", number)


def is_dns_pods(peer):
    ns = (peer.get("namespaceSelector") or {}).get("matchLabels") or {}
    pods = (peer.get("podSelector") or {}).get("matchLabels") or {}
    return "ipBlock" not in peer and ns == DNS_NAMESPACE and pods.items() >= DNS_PODS.items()


errors = []
to_dns = 0
for doc in yaml.safe_load_all(open(sys.argv[1])):
    if not doc or doc["kind"] != "NetworkPolicy":
        continue
    name = doc["metadata"]["name"]
    for i, rule in enumerate(doc["spec"].get("egress") or []):
        ports = rule.get("ports") or []
        if ports and not any(reaches_53(p) for p in ports):
            continue
        peers = rule.get("to") or []
        if not peers:
            errors.append(f"NetworkPolicy {name}: egress rule {i} lets port 53 out to any "
                          f"address, {EXPECTED}")
            continue
        for peer in peers:
            if not is_dns_pods(peer):
                errors.append(f"NetworkPolicy {name}: egress rule {i} lets port 53 out to "
                              f"{peer}, {EXPECTED}")
        to_dns += all(is_dns_pods(p) for p in peers)
if not errors and to_dns == 0:
    errors.append("no NetworkPolicy lets DNS out to the cluster's DNS pods: the pods could "
                  "not resolve the servers' names")
if errors:
    sys.exit("\n".join(errors))
print(f"{to_dns} egress rule(s) to the DNS pods, none to any other address")
EOF

# Every checkov.io/skip annotation names a check and gives a reason.
cat >"$work/skips.py" <<'EOF'
import re
import sys
import yaml

bad = []
skips = []
for doc in yaml.safe_load_all(open(sys.argv[1])):
    if not doc:
        continue
    for key, value in (doc["metadata"].get("annotations") or {}).items():
        if not key.startswith("checkov.io/skip"):
            continue
        skips.append(value)
        if not re.fullmatch(r"CKV2?_\w+=\s*\S.{9,}", value):
            bad.append(f"{doc['kind']} {doc['metadata']['name']}: {key}: {value!r} gives no reason")
if bad:
    sys.exit("\n".join(bad))
print(f"{len(skips)} skips, each with a reason")
EOF

# Each role holds only its own credentials (docs/security.md#roles).
cat >"$work/roles.py" <<'EOF'
import base64
import sys
import yaml

docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
errors = []
mounted = set()
for d in docs:
    if d["kind"] not in ("StatefulSet", "Job"):
        continue
    spec = d["spec"]["template"]["spec"]
    secrets = {v["secret"]["secretName"] for v in spec.get("volumes") or [] if "secret" in v}
    mounted |= secrets
    args = [a for c in spec["containers"] for a in c.get("args") or []]
    server_token = any(a.startswith("--server_token_file=") for a in args)
    token = any(a.startswith("--auth_token_file=") for a in args)
    name = f"{d['kind']} {d['metadata']['name']}"
    if d["kind"] == "Job":
        for s in secrets:
            if "server" in s:
                errors.append(f"{name} mounts Secret {s}, expected only the workers' own")
        if server_token:
            errors.append(f"{name} names --server_token_file, expected none in a worker")
    elif token and not server_token:
        errors.append(f"{name} has --auth_token_file without --server_token_file: any worker "
                      "could join as a server")
if len(sys.argv) > 2:  # the Secrets make_security_secret.sh prints
    made = {d["metadata"]["name"]: {k: base64.b64decode(v) for k, v in d["data"].items()}
            for d in yaml.safe_load_all(open(sys.argv[2])) if d and d["kind"] == "Secret"}
    want = {"psync-server-security": {"tls.crt", "tls.key", "ca.crt", "token", "server_token"},
            "psync-worker-security": {"tls.crt", "tls.key", "ca.crt", "token"}}
    for name, keys in want.items():
        if set(made.get(name, {})) != keys:
            errors.append(f"Secret {name} holds {sorted(made.get(name, {}))}, expected "
                          f"{sorted(keys)}")
    if not errors:
        server, worker = made["psync-server-security"], made["psync-worker-security"]
        if server["tls.key"] == worker["tls.key"] or server["tls.crt"] == worker["tls.crt"]:
            errors.append("the workers' Secret holds the servers' certificate or key")
        if server["server_token"] == server["token"]:
            errors.append("the servers' token is the job's, which every worker holds")
        if server["token"] != worker["token"] or server["ca.crt"] != worker["ca.crt"]:
            errors.append("the Secrets differ in the job's token or CA")
    if mounted and mounted != set(want):
        errors.append(f"the rendering mounts Secrets {sorted(mounted)}, expected {sorted(want)}")
if errors:
    sys.exit("\n".join(errors))
print(f"Secrets mounted: {sorted(mounted) or 'none'}; each role only its own")
EOF

# --- render -----------------------------------------------------------------
overlays=()
for dir in deploy/k8s/overlays/*/; do overlays+=("$(basename "$dir")"); done
rendered=()  # the overlays' renderings, which are checked below
if [[ -n "${tool[kubectl]}" ]]; then
  # NAME DIR OUT: renders DIR into OUT.
  render() {
    if timeout 60 "${tool[kubectl]}" kustomize "$2" >"$3" 2>"$work/out"; then
      pass "$1"
    else
      fail "$1" "$work/out"
      rm -f "$3"
      return 1
    fi
  }
  render "kustomize renders base" deploy/k8s/base "$work/base.yaml"
  for o in "${overlays[@]}"; do
    render "kustomize renders overlay $o" "deploy/k8s/overlays/$o" "$work/$o.yaml" && rendered+=("$o")
  done
fi

# Files applied on their own, not through kustomize (the namespace, the
# collect pod), are validated and checked like a rendering.
for f in deploy/k8s/namespace.yaml deploy/k8s/tools/*.yaml; do echo "---"; cat "$f"; done \
  >"$work/standalone.yaml"
checked=("${rendered[@]}" standalone)

# --- kubernetes-validate ----------------------------------------------------
if [[ -n "${tool[kubernetes-validate]}" ]]; then
  # Its newest bundled version is its default ("Defaults to 1.37.0").
  newest=$(timeout 60 "${tool[kubernetes-validate]}" --help 2>/dev/null | tr -s ' \n' ' ' |
           sed -n 's/.*Defaults to \([0-9][0-9.]*[0-9]\).*/\1/p')
  if [[ -z "$newest" ]]; then
    echo "no 'Defaults to X' in kubernetes-validate --help" >"$work/out"
    fail "kubernetes-validate names its newest version" "$work/out"
  fi
  newest=$(echo "$newest" | cut -d. -f1,2)
  versions=$(printf '%s\n' 1.27 1.30 ${newest:+"$newest"} | sort -u -V)
  for o in "${checked[@]}"; do
    for v in $versions; do
      check "kubernetes-validate --strict $o for Kubernetes $v" 120 \
        "${tool[kubernetes-validate]}" --strict --quiet -k "$v" "$work/$o.yaml"
    done
  done
fi

# --- checkov ----------------------------------------------------------------
if [[ -n "${tool[checkov]}" && -n "$python" ]]; then
  for o in "${checked[@]}"; do
    check "checkov $o" 180 "${tool[checkov]}" --framework kubernetes --skip-download \
      --compact --quiet -f "$work/$o.yaml"
    check "checkov skips in $o are justified" 60 "$python" "$work/skips.py" "$work/$o.yaml"
  done
fi

# --- hadolint ---------------------------------------------------------------
if [[ -n "${tool[hadolint]}" ]]; then
  for f in deploy/image/Containerfile*; do
    check "hadolint $f" 60 "${tool[hadolint]}" --no-color "$f"
  done
fi

# --- yamllint ---------------------------------------------------------------
if [[ -n "${tool[yamllint]}" ]]; then
  check "yamllint deploy/k8s" 120 "${tool[yamllint]}" --strict -c .yamllint deploy/k8s
fi

# --- server and worker counts -----------------------------------------------
if [[ -n "$python" && -n "${tool[kubectl]}" ]]; then
  [[ -s "$work/base.yaml" ]] && check "counts agree in base" 60 "$python" "$work/counts.py" "$work/base.yaml"
  for o in "${rendered[@]}"; do
    check "counts agree in overlay $o" 60 "$python" "$work/counts.py" "$work/$o.yaml"
  done
  # An overlay of the cpu-demo overlay with 3 servers and 4 workers: the
  # flags must follow by construction (deploy/k8s/base/cluster-size).
  # kustomize takes relative paths only.
  mkdir -p "$work/scaled"
  rel=$(realpath --relative-to="$work/scaled" deploy/k8s)
  cat >"$work/scaled/kustomization.yaml" <<EOF
resources: [$rel/overlays/cpu-demo]
replicas:
  - {name: psync-server, count: 3}
patches:
  - target: {kind: Job, name: psync-worker}
    patch: '[{"op": "replace", "path": "/spec/completions", "value": 4}]'
transformers: [$rel/base/cluster-size]
EOF
  if timeout 60 "${tool[kubectl]}" kustomize "$work/scaled" >"$work/scaled.yaml" 2>"$work/out" &&
     timeout 60 "$python" "$work/counts.py" "$work/scaled.yaml" >"$work/out" 2>&1 &&
     grep -qx '3 servers, 4 workers' "$work/out"; then
    pass "counts follow an overlay's replicas and completions"
  else
    fail "counts follow an overlay's replicas and completions" "$work/out"
  fi
  # The elastic overlay with 5 completions (and flags), its job.pbtxt's
  # max_workers still 4: the ranks and the global batch would disagree,
  # refused by name. (Edited in the rendering: base/cluster-size cannot run
  # again over an overlay whose counts it has already rewritten.)
  if [[ -s "$work/elastic.yaml" ]] &&
     sed 's/^  completions: 4$/  completions: 5/; s/--num_workers=4$/--num_workers=5/' \
       "$work/elastic.yaml" >"$work/elastic5.yaml" &&
     ! timeout 60 "$python" "$work/counts.py" "$work/elastic5.yaml" >"$work/out" 2>&1 &&
     grep -q "max_workers 4 != completions 5" "$work/out"; then
    pass "an elastic job's max_workers other than completions is refused"
  else
    fail "an elastic job's max_workers other than completions is refused" "$work/out"
  fi
fi

# --- DNS egress -------------------------------------------------------------
if [[ -n "$python" && -n "${tool[kubectl]}" ]]; then
  [[ -s "$work/base.yaml" ]] &&
    check "DNS egress only to the DNS pods in base" 60 "$python" "$work/dns_egress.py" "$work/base.yaml"
  for o in "${rendered[@]}"; do
    check "DNS egress only to the DNS pods in overlay $o" 60 \
      "$python" "$work/dns_egress.py" "$work/$o.yaml"
  done
  # The check can fail: the base's policy with a rule for port 53 to any
  # address (as these manifests once had) is refused by name.
  cat >"$work/open_dns.py" <<'EOF'
import sys
import yaml

docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
for d in docs:
    if d["kind"] == "NetworkPolicy":
        d["spec"]["egress"].append({"ports": [{"port": 53, "protocol": "UDP"}]})
yaml.safe_dump_all(docs, sys.stdout)
EOF
  if [[ -s "$work/base.yaml" ]] &&
     timeout 60 "$python" "$work/open_dns.py" "$work/base.yaml" >"$work/open_dns.yaml" &&
     ! timeout 60 "$python" "$work/dns_egress.py" "$work/open_dns.yaml" >"$work/out" 2>&1 &&
     grep -q "lets port 53 out to any address" "$work/out"; then
    pass "DNS egress to any address is refused"
  else
    fail "DNS egress to any address is refused" "$work/out"
  fi
fi

# --- role credentials -------------------------------------------------------
if [[ -n "$python" && -n "${tool[kubectl]}" ]]; then
  for o in "${rendered[@]}"; do
    check "each role only its own credentials in overlay $o" 60 \
      "$python" "$work/roles.py" "$work/$o.yaml"
  done
  if [[ " ${rendered[*]} " != *" secure-demo "* ]]; then
    :  # its rendering failed, above
  elif PATH="$(dirname "${tool[kubectl]}"):$PATH" timeout 60 \
       bash deploy/k8s/tools/make_security_secret.sh psync "" 2 >"$work/secrets.yaml" \
       2>"$work/out"; then
    check "make_security_secret.sh gives each role only its own, as secure-demo mounts" 60 \
      "$python" "$work/roles.py" "$work/secure-demo.yaml" "$work/secrets.yaml"
    # The check can fail: the workers given the servers' Secret are refused.
    sed 's/secretName: psync-worker-security/secretName: psync-server-security/' \
      "$work/secure-demo.yaml" >"$work/shared_secret.yaml"
    if ! timeout 60 "$python" "$work/roles.py" "$work/shared_secret.yaml" >"$work/out" 2>&1 &&
       grep -q "Job psync-worker mounts Secret psync-server-security" "$work/out"; then
      pass "the servers' Secret in the workers is refused"
    else
      fail "the servers' Secret in the workers is refused" "$work/out"
    fi
  else
    fail "make_security_secret.sh runs" "$work/out"
  fi
fi

exit $failed
