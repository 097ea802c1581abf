"""Test harness: a RabbitMQ vhost per test, a real chimed, consumer processes."""
