// Package deploy holds the tests of taskgate's deployment files: the Helm
// chart under helm/taskgate, the Grafana dashboard under grafana, and the
// alert rules. It is a module of its own (taskgate/deploy) so that the
// Kubernetes API types it decodes manifests into stay out of the gateway's
// module. The tests render the chart with the helm binary (env HELM, else
// helm on PATH), decode every manifest strictly into its Kubernetes type,
// and run `gateway check` on the rendered taskgate.yaml.
package deploy
