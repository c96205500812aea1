# Set-up and entry points. Every target installs what it needs into .venv first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: install install-test browser zookeeper netns demo test bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

# The product alone (what `make demo` needs); the tests add their extra on top.
install: $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e . --config-settings editable_mode=compat

install-test: install
	$(BIN)/pip install -q -e '.[test]' --config-settings editable_mode=compat

demo: install
	bash scripts/demo.sh

# The browser tests drive Debian's Chromium (no browser download from Playwright).
browser:
	@command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium >/dev/null; \
	  else sudo apt-get update -qq && sudo apt-get install -y -qq chromium >/dev/null; fi; }

# The ZOOKEEPER recovery tests run Debian's ZooKeeper server (its jars, with the machine's
# Java) on a free loopback port; the package installs no running service.
zookeeper:
	@test -f /usr/share/java/zookeeper.jar || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends zookeeper >/dev/null; \
	  else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends zookeeper >/dev/null; fi; }

# The multi-host tests build hosts from network namespaces (root): `ip` and `nft`.
netns:
	@command -v ip >/dev/null && command -v nft >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq iproute2 nftables >/dev/null; \
	  else echo "multi-host tests need root and iproute2/nftables; they will be skipped"; fi; }

# curl: the newest Airflow Spark provider polls and kills through it (tests/test_airflow.py);
# valgrind: benchmarks.instructions counts a warm job's instructions with it (its smoke test).
test: install-test browser zookeeper netns
	@command -v curl >/dev/null && command -v valgrind >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq curl valgrind >/dev/null; \
	  else sudo apt-get update -qq && sudo apt-get install -y -qq curl valgrind >/dev/null; fi; }
	$(BIN)/python -m pytest -q -p no:cacheprovider

bench: install-test zookeeper
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) build *.egg-info benchmarks/.data
