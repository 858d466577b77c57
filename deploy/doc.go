// Package deploy holds ferry's deploy artefacts, not code: the Dockerfile,
// docker-compose.yml, the Kubernetes manifests (k8s/), the systemd unit
// (systemd/), the Prometheus alert rules (prometheus/) and the Grafana
// dashboard (grafana/). See README.md in this directory.
//
// Its tests check the artefacts against the code: the environment
// variables and commands against the CLI's flags, the probe paths and the
// metric names against a running worker, the alert rules with promtool, the
// unit with systemd-analyze, and the Dockerfile's build steps. They install
// promtool and systemd-analyze (Debian's prometheus and systemd packages)
// when missing, and fail when they cannot.
package deploy
