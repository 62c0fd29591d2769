# The deployment checks' shared reporting, sourced by tests/k8s/play_test.sh
# and tests/hosts/launch_hosts_test.sh: one "PASS name" / "FAIL name" line
# per check, `failed` set once one failed, and a summary's weights_sha256.
failed=0
result() {  # NAME OK [DETAIL]
  if [[ "$2" == 1 ]]; then echo "PASS $1"; else echo "${3:+$3
}FAIL $1"; failed=1; fi
}
sha_of() {  # summary.json -> weights_sha256
  sed -n 's/.*"weights_sha256": "\([0-9a-f]*\)".*/\1/p' "$1" 2>/dev/null
}
