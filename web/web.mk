# web.mk - the web part's build rules, included by the top Makefile.
#
# The page's files (web/assets/*) and Debian's Chart.js are embedded into
# the binary as a generated C file, so the page works offline and the
# server never reads files from disk.
#
#   make bench-web   API p99 latency of the study-page data (1000 trials x
#                    10 000 points) and time to a drawn study page in Chromium.

CHARTJS ?= /usr/share/javascript/chart.js/chart.min.js
WEB_ASSET_FILES := $(sort $(wildcard web/assets/*))
WEB_ASSETS_C    := $(BUILD)/gen/web_assets.c
WEB_ASSETS_OBJ  := $(BUILD)/obj/gen/web_assets.o

$(WEB_ASSETS_C): $(WEB_ASSET_FILES) $(CHARTJS) scripts/embed-assets.py
	@mkdir -p $(dir $@)
	@test -r $(CHARTJS) || { echo "missing $(CHARTJS): run scripts/install-deps.sh (libjs-chart.js)"; exit 1; }
	$(PYTHON) scripts/embed-assets.py $@ $(WEB_ASSET_FILES) $(CHARTJS)=/chart.min.js

$(WEB_ASSETS_OBJ): $(WEB_ASSETS_C)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

.PHONY: bench-web
bench-web: all
	@PYTHON=$(PYTHON) BUILD=$(BUILD) bench/web.sh
