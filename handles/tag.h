/* SPDX-License-Identifier: MIT */
/* tag.h - the exporter's tag of an exported object: SipHash-2-4 (40 bits
 * kept) of (fd, inode low 32 bits) under a random key never published (a
 * fork child makes its own). Records carry it; the broker recomputes it
 * and serves a peer of another uid only what it shows the tag of. */
#ifndef BYVAL_HANDLES_TAG_H
#define BYVAL_HANDLES_TAG_H

#include "handles/wire.h"

/* The tag of (fd, ino) into *tag_p (1..2^40-1): 0, or -1 with errno
 * when no key could be made (getrandom and /dev/urandom failed). */
int byval_tag_make(uint32_t fd, uint32_t ino, uint64_t *tag_p);

/* rec->tag = the tag of (rec->fd, rec->fd_ino): 0, or -1 with errno and
 * rec->tag 0 (then only peers of our uid are served). */
int byval_record_tag(byval_record_t *rec);

/* 1 if tag is (fd, ino)'s tag under our key, else 0 (no key: 0). */
int byval_tag_check(uint32_t fd, uint32_t ino, uint64_t tag);

/* SipHash-2-4 of len bytes at in under the 16-byte key k (for tests:
 * the reference vectors). */
uint64_t byval_siphash24(const uint8_t k[16], const void *in, size_t len);

#endif
