"""The local stack for one machine: Kafka-protocol clusters from librdkafka's mock cluster, and `streamplane dev`."""
