# Set-up and entry points. Every target installs what it needs into .venv first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: install browser netns demo test bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

install: $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]' --config-settings editable_mode=compat

demo: install
	bash scripts/demo.sh

# The browser tests drive Debian's Chromium (no browser download from Playwright).
browser:
	@command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium >/dev/null; \
	  else sudo apt-get update -qq && sudo apt-get install -y -qq chromium >/dev/null; fi; }

# The multi-host tests build hosts from network namespaces (root): `ip` and `nft`.
netns:
	@command -v ip >/dev/null && command -v nft >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq iproute2 nftables >/dev/null; \
	  else echo "multi-host tests need root and iproute2/nftables; they will be skipped"; fi; }

test: install browser netns
	$(BIN)/python -m pytest -q -p no:cacheprovider

bench: install
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) build *.egg-info benchmarks/.data
