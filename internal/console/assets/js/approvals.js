// Approvals. The fleet has no approvals API yet: when it does (list the
// pending ones, approve, deny), approvalActions returns the approve and
// deny buttons for an approval_requested event, and pages.js gains a
// page of pending approvals. Until then the run page shows the events.

export function approvalActions(ev, run) {
  return null;
}
