/* SPDX-License-Identifier: MIT */
/*
 * zedrv: event pools and events. A pool is a memfd with one cache line of
 * state per event, mapped MAP_SHARED, so a host signal in one process is
 * seen by every process that opened the pool's IPC handle.
 */
#include "test/zedrv/zedrv.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

#define EVENT_CLEAR 0u
#define EVENT_SIGNALED 1u

static ze_event_pool_handle_t pool_list;

bool zedrv_pool_fd_is_internal(int fd)
{
    for (ze_event_pool_handle_t p = pool_list; p != NULL; p = p->next)
        if (p->memfd == fd)
            return true;
    return false;
}

ze_event_pool_handle_t zedrv_pool_add(ze_context_handle_t context, ze_event_pool_flags_t flags,
                                      uint32_t count, void *base, size_t map_size, int memfd,
                                      bool imported)
{
    ze_event_pool_handle_t pool = calloc(1, sizeof(*pool));

    if (pool == NULL)
        return NULL;
    pool->magic = ZEDRV_MAGIC_POOL;
    pool->context = context;
    pool->flags = flags;
    pool->count = count;
    pool->base = base;
    pool->map_size = map_size;
    pool->memfd = memfd;
    pool->export_fd = -1;
    pool->imported = imported;
    pool->next = pool_list;
    pool_list = pool;
    return pool;
}

void zedrv_pool_release(ze_event_pool_handle_t pool)
{
    pthread_mutex_lock(&zedrv_lock);
    for (ze_event_pool_handle_t *pp = &pool_list; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == pool) {
            *pp = pool->next;
            break;
        }
    }
    pthread_mutex_unlock(&zedrv_lock);
    munmap(pool->base, pool->map_size);
    if (pool->export_fd >= 0)
        close(pool->export_fd);
    if (pool->memfd >= 0)
        close(pool->memfd);
    ZEDRV_LOG("released %s event pool %p", pool->imported ? "imported" : "own",
              (void *)pool);
    pool->magic = 0;
    free(pool);
}

/* zeContextDestroy under ZEDRV_CONTEXT_DESTROY=all: the context's own
 * pools go with it (their fds closed, their memory unmapped), as the
 * spec lets a context take what was made in it. The handle is poisoned,
 * never freed, so a later call with it is refused, not a use after free. */
void zedrv_pools_context_destroyed(ze_context_handle_t context)
{
    if (zedrv_config()->ctx_destroy != ZEDRV_CTX_DESTROY_ALL)
        return;
    pthread_mutex_lock(&zedrv_lock);
    for (ze_event_pool_handle_t *pp = &pool_list; *pp != NULL;) {
        ze_event_pool_handle_t pool = *pp;
        if (pool->context != context || pool->imported) {
            pp = &pool->next;
            continue;
        }
        *pp = pool->next;
        munmap(pool->base, pool->map_size);
        if (pool->export_fd >= 0)
            close(pool->export_fd);
        close(pool->memfd);
        pool->magic = 0;
        ZEDRV_LOG("zeContextDestroy(%p): released event pool %p", (void *)context, (void *)pool);
    }
    pthread_mutex_unlock(&zedrv_lock);
}

static bool pool_ok(ze_event_pool_handle_t pool)
{
    return pool != NULL && pool->magic == ZEDRV_MAGIC_POOL;
}

static bool event_ok(ze_event_handle_t event)
{
    return event != NULL && event->magic == ZEDRV_MAGIC_EVENT;
}

ze_result_t zedrv_event_pool_create(ze_context_handle_t context,
                                    const ze_event_pool_desc_t *desc, uint32_t num_devices,
                                    ze_device_handle_t *devices, ze_event_pool_handle_t *out)
{
    ze_event_pool_handle_t pool;
    size_t map_size;
    void *base;
    int fd;

    if (!zedrv_context_ok(context))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (desc == NULL || out == NULL || (num_devices > 0 && devices == NULL))
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    if (desc->count == 0)
        return ZE_RESULT_ERROR_INVALID_SIZE;
    for (uint32_t i = 0; i < num_devices; i++)
        if (!zedrv_device_ok(devices[i]))
            return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    base = zedrv_shm_create(ZEDRV_MEMFD_EVENT_POOL, (size_t)desc->count * ZEDRV_EVENT_STRIDE,
                            &fd, &map_size);
    if (base == NULL)
        return ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY;
    pthread_mutex_lock(&zedrv_lock);
    pool = zedrv_pool_add(context, desc->flags, desc->count, base, map_size, fd, false);
    pthread_mutex_unlock(&zedrv_lock);
    if (pool == NULL) {
        munmap(base, map_size);
        close(fd);
        return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    }
    ZEDRV_LOG("zeEventPoolCreate(count %u, flags 0x%x) = %p (memfd %d)", desc->count,
              (unsigned)desc->flags, (void *)pool, fd);
    *out = pool;
    return ZE_RESULT_SUCCESS;
}

ze_result_t zedrv_event_pool_destroy(ze_event_pool_handle_t pool)
{
    if (!pool_ok(pool))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    /* Destroying an imported pool is what zeEventPoolCloseIpcHandle does. */
    zedrv_pool_release(pool);
    return ZE_RESULT_SUCCESS;
}

ze_result_t zedrv_event_create(ze_event_pool_handle_t pool, const ze_event_desc_t *desc,
                               ze_event_handle_t *out)
{
    ze_event_handle_t event;

    if (!pool_ok(pool))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (desc == NULL || out == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    if (desc->index >= pool->count)
        return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    event = calloc(1, sizeof(*event));
    if (event == NULL)
        return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    event->magic = ZEDRV_MAGIC_EVENT;
    event->pool = pool;
    event->index = desc->index;
    event->state = (uint64_t *)((char *)pool->base + (size_t)desc->index * ZEDRV_EVENT_STRIDE);
    /* Like compute-runtime's Event::create: an event of an imported pool is
     * not reset, the exporter may have signalled it already. */
    if (!pool->imported)
        __atomic_store_n(event->state, EVENT_CLEAR, __ATOMIC_RELEASE);
    *out = event;
    return ZE_RESULT_SUCCESS;
}

ze_result_t zedrv_event_destroy(ze_event_handle_t event)
{
    if (!event_ok(event))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    event->magic = 0;
    free(event);
    return ZE_RESULT_SUCCESS;
}

ze_result_t zedrv_event_host_signal(ze_event_handle_t event)
{
    if (!event_ok(event))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    __atomic_store_n(event->state, EVENT_SIGNALED, __ATOMIC_RELEASE);
    return ZE_RESULT_SUCCESS;
}

ze_result_t zedrv_event_query_status(ze_event_handle_t event)
{
    if (!event_ok(event))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    return __atomic_load_n(event->state, __ATOMIC_ACQUIRE) == EVENT_SIGNALED
               ? ZE_RESULT_SUCCESS
               : ZE_RESULT_NOT_READY;
}

ze_result_t zedrv_event_host_reset(ze_event_handle_t event)
{
    if (!event_ok(event))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    __atomic_store_n(event->state, EVENT_CLEAR, __ATOMIC_RELEASE);
    return ZE_RESULT_SUCCESS;
}

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

ze_result_t zedrv_event_host_synchronize(ze_event_handle_t event, uint64_t timeout_ns)
{
    const struct timespec nap = {0, 20000}; /* the signaller is another process */
    uint64_t deadline;
    ze_result_t r;

    r = zedrv_event_query_status(event);
    if (r != ZE_RESULT_NOT_READY || timeout_ns == 0)
        return r;
    deadline = timeout_ns == UINT64_MAX ? UINT64_MAX : now_ns() + timeout_ns;
    while ((r = zedrv_event_query_status(event)) == ZE_RESULT_NOT_READY) {
        if (deadline != UINT64_MAX && now_ns() >= deadline)
            return ZE_RESULT_NOT_READY;
        nanosleep(&nap, NULL);
    }
    return r;
}

/*
 * Test-only, exported by name: event pools this process holds, the
 * imported ones in *imported_p (may be NULL). Reads driver state only, so
 * a program can watch its imports go without calling Level Zero.
 */
ZEDRV_EXPORT int zedrvPoolCount(int *imported_p);

int zedrvPoolCount(int *imported_p)
{
    int n = 0, imported = 0;

    pthread_mutex_lock(&zedrv_lock);
    for (ze_event_pool_handle_t p = pool_list; p != NULL; p = p->next) {
        n++;
        imported += p->imported;
    }
    pthread_mutex_unlock(&zedrv_lock);
    if (imported_p != NULL)
        *imported_p = imported;
    return n;
}
