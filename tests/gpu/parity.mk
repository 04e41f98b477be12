# parity_dump: the model's side of scripts/hf_parity.py (any backend)
$(BUILD)/parity_dump: $(call obj,tests/gpu/parity_dump.c) $(CORE_OBJ)
	$(LINK) $^ -o $@ $(LDLIBS)
