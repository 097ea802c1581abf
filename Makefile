# Chime's developer commands. `make help` lists them.
.DEFAULT_GOAL := help
.PHONY: help demo test lint fix ci

help: ## list the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-6s %s\n", $$1, $$2}'

demo: ## run the demo until Ctrl-C (deploy/local/demo.sh)
	deploy/local/demo.sh

test: ## ensure RabbitMQ and PostgreSQL, then run every test (deploy/local/test.sh)
	deploy/local/test.sh

lint: ## cargo fmt --check, clippy with warnings as errors, no import circle between files
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	python3 tests/tools/import-circles.py scheduler/src consumer-lib/src testkit/src

fix: ## format and apply clippy's fixes
	cargo fmt --all
	cargo clippy --workspace --all-targets --fix --allow-dirty --allow-staged

ci: ## what CI runs (.ci/run)
	.ci/run
