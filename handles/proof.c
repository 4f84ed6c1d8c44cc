/* SPDX-License-Identifier: MIT */
/*
 * proof.c - the proof of export the library installs in the pipeline
 * (resolve.h's byval_prover_t): the exporter's own registry, mapped in
 * this process once per exporter (registry_view.c), lists the fd under
 * the key the record names it by (byval_record_key).
 *
 * What it proves, and what it assumes. The registry is the exporter's
 * table of what it exported: (key, fd number, inode, serial), a serial
 * never reused in a process image, and an entry withdrawn (serial 0)
 * BEFORE its fd is closed. So an entry (key, fd, ino, serial) read before
 * pidfd_getfd and unchanged after it proves that the number held the
 * exported open file all along: a close and a reuse of the number in
 * between would have withdrawn the entry first. This holds where the
 * inode cannot tell (every NVIDIA VMM chunk fd is /dev/nvidiactl, one
 * inode for all: the number of a freed chunk, reused by the next export,
 * has the same inode but another key and serial), and costs no system
 * call: the registry is mapped already. (The cross-process order: the
 * exporter's store of 0 precedes its close; our load follows our
 * pidfd_getfd; both system calls take the exporter's fd table lock.)
 *
 * A hostile exporter writes its registry as it likes: it can make us
 * duplicate any of ITS OWN open files, nothing of another process (the
 * pidfd was identified as the record's exporter first). What we do with
 * such a duplicate is bounded by the pipeline's last step: statx from
 * cached attributes (never a FUSE round trip), a kind we may use or it
 * is refused and closed off our thread when its close could wait on a
 * file system (fdcheck.c's byval_fd_release). The registry's header
 * names its process (identity), so another process's registry is never
 * taken for the exporter's.
 */
#include "handles/registry.h"
#include "handles/registry_view.h"
#include "handles/resolve_internal.h"

uint64_t byval_record_key(const byval_record_t *rec, uint32_t fd)
{
    /* The record's own fd is published under its kind and allocation id;
     * any other fd it leads to is a chunk its manifest lists, published
     * under the chunk kind and the same id (shim/cu_export.c). */
    return fd == rec->fd ? BYVAL_REG_KEY(rec->kind, rec->alloc_id)
                         : BYVAL_REG_KEY(BYVAL_KIND_CU_VMM, rec->alloc_id);
}

static byval_status_t prove(const byval_record_t *rec, int pidfd, uint32_t pid, uint32_t fd,
                            uint32_t ino, byval_proof_t *proof, char *msg, size_t msglen)
{
    uint64_t key = byval_record_key(rec, fd);
    char why[384] = "";
    byval_status_t st;
    byval_reg_view_t *v = byval_reg_attach_st(rec, BYVAL_MODE_PIDFD, pidfd, &st, why, sizeof(why));
    if (!v) {
        /* Refused by the kernel as pidfd_getfd would be: the caller's
         * policy decides (auto tries the socket, whose broker serves only
         * what its exporter offered). */
        if (st == BYVAL_E_PERM || st == BYVAL_E_NOSYS || st == BYVAL_E_GONE || st == BYVAL_E_NOFD) {
            byval_msg(msg, msglen, "%s", why);
            return st;
        }
        byval_msg(msg, msglen, "fd %u of pid %u is not proven exported (%s): not duplicated", fd,
                  pid, why);
        return BYVAL_E_FDKIND;
    }
    uint64_t serial = 0;
    const uint64_t *word = byval_reg_find_fd(v, key, fd, ino, &serial);
    if (!word) {
        byval_reg_view_put(v);
        byval_msg(msg, msglen,
                  "pid %u's registry does not list fd %u (inode %u) as the export the handle "
                  "names: freed since, or a stale or forged handle, not duplicated",
                  pid, fd, ino);
        return BYVAL_E_FDKIND;
    }
    proof->word = word;
    proof->serial = serial;
    proof->hold = v;
    return BYVAL_OK;
}

static void done(byval_proof_t *proof)
{
    byval_reg_view_put(proof->hold);
    proof->word = NULL;
    proof->hold = NULL;
}

const byval_prover_t byval_reg_prover = {prove, done};
