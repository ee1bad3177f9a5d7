"""Stand-ins that tests, benchmarks and the simulator start in place of what a deployment runs against:
`kafka_fleet`, many Kafka clusters on one machine for the control plane's cost at fleet size;
`cluster_admin`, Kafka clusters held in memory; `chaos_store`, a store that injects FoundationDB's failures.
Never imported by the product."""
