/* SPDX-License-Identifier: MIT */
/*
 * zedrv: command queues and lists, executed on the host. An immediate list
 * runs each append at once (synchronously, whatever the queue mode); a
 * regular list records its appends and runs them on
 * zeCommandQueueExecuteCommandLists. Enough for tests that move data.
 */
#include "test/zedrv/zedrv.h"

#include <stdlib.h>
#include <string.h>

/* A GPU waiting on an event nobody signals hangs; a test should not. */
#define WAIT_TIMEOUT_NS (60ull * 1000000000ull)

enum op_kind { OP_COPY, OP_FILL, OP_SIGNAL, OP_WAIT };

struct op {
    enum op_kind kind;
    void *dst;
    const void *src;
    size_t size;
    void *pattern; /* OP_FILL: owned copy */
    size_t pattern_size;
    ze_event_handle_t signal;
    uint32_t num_wait;
    ze_event_handle_t *wait; /* owned copy */
};

/* Largest fill pattern of a copy engine (zedrv_device_get_queue_groups). */
#define COPY_FILL_MAX 4u

struct _ze_command_list_handle_t {
    uint32_t magic;
    bool immediate;
    bool closed;
    bool copy_only; /* queue group 1: the copy engine */
    struct op *ops;
    size_t num_ops, cap_ops;
};

struct _ze_command_queue_handle_t {
    uint32_t magic;
};

static bool list_ok(ze_command_list_handle_t list)
{
    return list != NULL && list->magic == ZEDRV_MAGIC_CMDLIST;
}

static ze_result_t op_run(const struct op *op)
{
    ze_result_t r;

    for (uint32_t i = 0; i < op->num_wait; i++) {
        r = zedrv_event_host_synchronize(op->wait[i], WAIT_TIMEOUT_NS);
        if (r == ZE_RESULT_NOT_READY) {
            ZEDRV_LOG("command list waited 60 s on event %p: giving up", (void *)op->wait[i]);
            return ZE_RESULT_ERROR_DEVICE_LOST;
        }
        if (r != ZE_RESULT_SUCCESS)
            return r;
    }
    switch (op->kind) {
    case OP_COPY:
        memmove(op->dst, op->src, op->size);
        break;
    case OP_FILL:
        for (size_t off = 0; off < op->size; off += op->pattern_size) {
            size_t n = op->size - off < op->pattern_size ? op->size - off : op->pattern_size;

            memcpy((char *)op->dst + off, op->pattern, n);
        }
        break;
    case OP_SIGNAL:
    case OP_WAIT:
        break;
    }
    return op->signal != NULL ? zedrv_event_host_signal(op->signal) : ZE_RESULT_SUCCESS;
}

static void op_free(struct op *op)
{
    free(op->pattern);
    free(op->wait);
}

/* Run now (immediate list) or record (regular list); takes ownership. */
static ze_result_t list_append(ze_command_list_handle_t list, struct op *op, uint32_t num_wait,
                               ze_event_handle_t *wait)
{
    ze_result_t r;

    if (!list_ok(list))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (num_wait > 0 && wait == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    op->num_wait = num_wait;
    op->wait = NULL;
    if (list->immediate) {
        op->wait = wait;
        r = op_run(op);
        op->wait = NULL;
        op_free(op);
        return r;
    }
    /* compute-runtime checks closedness only at execution
     * (CommandQueueHw::executeCommandLists): an append to a closed list,
     * executed or not, is accepted and the list stays closed; here it runs
     * with the rest at the next execution. */
    if (list->num_ops == list->cap_ops) {
        size_t cap = list->cap_ops ? list->cap_ops * 2 : 8;
        struct op *ops = realloc(list->ops, cap * sizeof(*ops));

        if (ops == NULL) {
            op_free(op);
            return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
        }
        list->ops = ops;
        list->cap_ops = cap;
    }
    if (num_wait > 0) {
        op->wait = malloc(num_wait * sizeof(*wait));
        if (op->wait == NULL) {
            op_free(op);
            return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
        }
        memcpy(op->wait, wait, num_wait * sizeof(*wait));
    }
    list->ops[list->num_ops++] = *op;
    return ZE_RESULT_SUCCESS;
}

static ze_result_t list_new(ze_context_handle_t context, ze_device_handle_t device,
                            bool immediate, uint32_t ordinal, ze_command_list_handle_t *out)
{
    ze_command_list_handle_t list;

    if (!zedrv_context_ok(context) || !zedrv_device_ok(device))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (out == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    list = calloc(1, sizeof(*list));
    if (list == NULL)
        return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    list->magic = ZEDRV_MAGIC_CMDLIST;
    list->immediate = immediate;
    list->copy_only = ordinal == 1;
    *out = list;
    return ZE_RESULT_SUCCESS;
}

ze_result_t zedrv_list_create(ze_context_handle_t context, ze_device_handle_t device,
                              const ze_command_list_desc_t *desc, ze_command_list_handle_t *out)
{
    if (desc == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    if (desc->commandQueueGroupOrdinal >= 2)
        return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    return list_new(context, device, false, desc->commandQueueGroupOrdinal, out);
}

ze_result_t zedrv_list_create_immediate(ze_context_handle_t context, ze_device_handle_t device,
                                        const ze_command_queue_desc_t *desc,
                                        ze_command_list_handle_t *out)
{
    if (desc == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    if (desc->ordinal >= 2 || desc->index >= 1)
        return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    return list_new(context, device, true, desc->ordinal, out);
}

ze_result_t zedrv_list_reset(ze_command_list_handle_t list)
{
    if (!list_ok(list))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    for (size_t i = 0; i < list->num_ops; i++)
        op_free(&list->ops[i]);
    list->num_ops = 0;
    list->closed = false;
    return ZE_RESULT_SUCCESS;
}

ze_result_t zedrv_list_destroy(ze_command_list_handle_t list)
{
    if (!list_ok(list))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    zedrv_list_reset(list);
    free(list->ops);
    list->magic = 0;
    free(list);
    return ZE_RESULT_SUCCESS;
}

ze_result_t zedrv_list_close(ze_command_list_handle_t list)
{
    if (!list_ok(list))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    list->closed = true;
    return ZE_RESULT_SUCCESS;
}

ze_result_t zedrv_list_append_barrier(ze_command_list_handle_t list, ze_event_handle_t signal,
                                      uint32_t num_wait, ze_event_handle_t *wait)
{
    struct op op = {.kind = OP_WAIT, .signal = signal};

    return list_append(list, &op, num_wait, wait);
}

ze_result_t zedrv_list_append_memory_copy(ze_command_list_handle_t list, void *dst,
                                          const void *src, size_t size,
                                          ze_event_handle_t signal, uint32_t num_wait,
                                          ze_event_handle_t *wait)
{
    struct op op = {.kind = OP_COPY, .dst = dst, .src = src, .size = size, .signal = signal};

    if (size > 0 && (dst == NULL || src == NULL))
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    return list_append(list, &op, num_wait, wait);
}

ze_result_t zedrv_list_append_memory_fill(ze_command_list_handle_t list, void *dst,
                                          const void *pattern, size_t pattern_size,
                                          size_t size, ze_event_handle_t signal,
                                          uint32_t num_wait, ze_event_handle_t *wait)
{
    struct op op = {.kind = OP_FILL, .dst = dst, .size = size, .signal = signal};

    if (dst == NULL || pattern == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    if (pattern_size == 0)
        return ZE_RESULT_ERROR_INVALID_SIZE;
    /* CommandListCoreFamily::appendBlitFill: a copy engine fills with
     * patterns of at most maxMemoryFillPatternSize bytes. */
    if (list_ok(list) && list->copy_only && pattern_size > COPY_FILL_MAX)
        return ZE_RESULT_ERROR_INVALID_SIZE;
    op.pattern = malloc(pattern_size);
    if (op.pattern == NULL)
        return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    memcpy(op.pattern, pattern, pattern_size);
    op.pattern_size = pattern_size;
    return list_append(list, &op, num_wait, wait);
}

ze_result_t zedrv_list_append_signal_event(ze_command_list_handle_t list,
                                           ze_event_handle_t event)
{
    struct op op = {.kind = OP_SIGNAL, .signal = event};

    if (event == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    return list_append(list, &op, 0, NULL);
}

ze_result_t zedrv_list_append_wait_on_events(ze_command_list_handle_t list, uint32_t num,
                                             ze_event_handle_t *events)
{
    struct op op = {.kind = OP_WAIT};

    return list_append(list, &op, num, events);
}

ze_result_t zedrv_queue_create(ze_context_handle_t context, ze_device_handle_t device,
                               const ze_command_queue_desc_t *desc,
                               ze_command_queue_handle_t *out)
{
    ze_command_queue_handle_t queue;

    if (!zedrv_context_ok(context) || !zedrv_device_ok(device))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (desc == NULL || out == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    /* Two queue groups of one queue each (zedrv_device_get_queue_groups). */
    if (desc->ordinal >= 2 || desc->index >= 1)
        return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    queue = calloc(1, sizeof(*queue));
    if (queue == NULL)
        return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    queue->magic = ZEDRV_MAGIC_QUEUE;
    *out = queue;
    return ZE_RESULT_SUCCESS;
}

ze_result_t zedrv_queue_destroy(ze_command_queue_handle_t queue)
{
    if (queue == NULL || queue->magic != ZEDRV_MAGIC_QUEUE)
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    queue->magic = 0;
    free(queue);
    return ZE_RESULT_SUCCESS;
}

ze_result_t zedrv_queue_execute(ze_command_queue_handle_t queue, uint32_t num,
                                ze_command_list_handle_t *lists, ze_fence_handle_t fence)
{
    if (queue == NULL || queue->magic != ZEDRV_MAGIC_QUEUE)
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (num == 0 || lists == NULL)
        return ZE_RESULT_ERROR_INVALID_SIZE;
    for (uint32_t i = 0; i < num; i++) {
        if (!list_ok(lists[i]))
            return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
        if (lists[i]->immediate || !lists[i]->closed)
            return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    }
    /* Work is done by the time this returns: Synchronize has nothing to wait for. */
    for (uint32_t i = 0; i < num; i++) {
        for (size_t j = 0; j < lists[i]->num_ops; j++) {
            ze_result_t r = op_run(&lists[i]->ops[j]);

            if (r != ZE_RESULT_SUCCESS)
                return r;
        }
    }
    return ZE_RESULT_SUCCESS;
}

ze_result_t zedrv_queue_synchronize(ze_command_queue_handle_t queue, uint64_t timeout)
{
    if (queue == NULL || queue->magic != ZEDRV_MAGIC_QUEUE)
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    return ZE_RESULT_SUCCESS;
}
