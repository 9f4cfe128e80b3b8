# tools/eval/: research evaluations on real routing traces (../shared/data,
# or $LOCUS_DATA_DIR): quality against the baselines people run, held out,
# with intervals. Figures are printed, never asserted (tests do that).
$(BUILD)/tools/eval/%.o: INCLUDES += -Itools/eval

# where the repository and the real traces are (tests use it too)
$(eval $(call LIBRARY,datapaths,tools/eval/data_paths.c))
# the shared parts: held-out scoring, the traffic bound, pairings, ESFT and
# OLMoE scenarios, per-decoder placement scores, recovery after a fault,
# online rebalancing replayed in time order
$(eval $(call LIBRARY,eval,tools/eval/grace_heldout.c tools/eval/grace_bound.c \
	tools/eval/grace_pairs.c tools/eval/grace_esft.c tools/eval/grace_olmoe.c \
	tools/eval/epgroups_score.c tools/eval/grace_adapt_score.c tools/eval/grace_online.c,\
	gracefit grace_plan trace formats common))

# ELDR against round robin and oracle domain routing
$(eval $(call PROGRAM,tools/eval/eldr_quality,tools/eval/eldr_quality.c,eldr_replay datapaths))
BENCHES += tools/eval/eldr_quality
# GRACE against EPLB
$(eval $(call PROGRAM,tools/eval/grace_figures,tools/eval/grace_figures.c,eval datapaths))
BENCHES += tools/eval/grace_figures
# the recovery fit against mask only, a refit and EPLB on the survivors
$(eval $(call PROGRAM,tools/eval/grace_adapt_figures,tools/eval/grace_adapt_figures.c,eval datapaths))
BENCHES += tools/eval/grace_adapt_figures
# locusctl rebalance against vLLM's EPLB, online, in time order
$(eval $(call PROGRAM,tools/eval/grace_online_figures,tools/eval/grace_online_figures.c,eval datapaths))
BENCHES += tools/eval/grace_online_figures
# the oracle bound on rows off the GPU any placement could reach
$(eval $(call PROGRAM,tools/eval/grace_bound_figures,tools/eval/grace_bound_figures.c,eval datapaths))
BENCHES += tools/eval/grace_bound_figures
# per-decoder placement against one global placement on ELDR-routed requests
$(eval $(call PROGRAM,tools/eval/epgroups_figures,tools/eval/epgroups_figures.c,\
	eval eldrfit eldr_router datapaths))
BENCHES += tools/eval/epgroups_figures
# distinct experts per decode batch with and without the signature cache
$(eval $(call PROGRAM,tools/eval/sigcache_evidence,tools/eval/sigcache_evidence.c,\
	sigcache eldrfit eldr_router trace datapaths))
BENCHES += tools/eval/sigcache_evidence
