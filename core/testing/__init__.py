"""Stand-ins that tests and benchmarks start in place of what a deployment runs against: `kafka_fleet`, many
Kafka clusters on one machine for the control plane's cost at fleet size. Never imported by the product."""
