# shellcheck shell=bash
# title: create --dry-run=server returns the pinned object and stores nothing
# order: 50
# kube: 1.20 1.32
# proves: `kubectl create --dry-run=server -o yaml` of a tag-only Deployment prints all three images
#   pinned and none unpinned; `kubectl get` afterwards says NotFound, and the namespace holds no
#   Deployment.

scenario_dry_run_server_stores_nothing() {
  local ns=e2e-e rc=0 out err
  e2e_ns "$ns"
  out=$(deployment_yaml dry | K -n "$ns" create --dry-run=server -o yaml -f -)
  local line stripped
  # shellcheck disable=SC2001
  stripped=$(sed -e 's/^[[:space:]-]*//' <<<"$out") # "      - image: x" -> "image: x"
  for line in "image: $(pinned init 1.0)" "image: $(pinned app 1.0)" "image: $(pinned sidecar 1.0)"; do
    if grep -qxF -- "$line" <<<"$stripped"; then
      ok "dry-run output has '$line'"
    else
      bad "dry-run output lacks '$line'; images in it: $(grep 'image:' <<<"$out" | tr -s ' ' | tr '\n' ';')" || rc=1
    fi
  done
  local unpinned
  unpinned=$(grep -E '^[[:space:]-]*image:' <<<"$out" | grep -vc '@sha256:' || true)
  expect_eq "unpinned images in the dry-run output" "$unpinned" 0 || rc=1
  if err=$(K -n "$ns" get deployment dry -o name 2>&1); then
    bad "kubectl get deployment dry found something after a dry run: $err" || rc=1
  else
    expect_contains "kubectl get after the dry run" "$err" 'NotFound' || rc=1
  fi
  expect_eq "deployments in $ns" "$(K -n "$ns" get deployments -o name | wc -l)" 0 || rc=1
  return "$rc"
}
