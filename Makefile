# The README's test command, and the microVM end-to-end run alone.
.PHONY: test e2e-oci-tools

test:
	scripts/test

# A real smolvm guest under KVM, its monitor read from /proc; skips (exit
# 77, saying why) where no guest boots; OZ0_E2E_MICROVM=0 skips it.
e2e-oci-tools:
	scripts/e2e-oci-tools
