/* export_tables.h - the driver's private tables that cudart and cuBLASLt ask for by UUID. */
#ifndef RM_FRONTEND_EXPORT_TABLES_H
#define RM_FRONTEND_EXPORT_TABLES_H

#include <cuda.h>

/* Backs cuGetExportTable: hands out the table for id, or refuses an unknown UUID (logging it once). */
CUresult rm_export_table_get(const void **table, const CUuuid *id);

/* The context-local storage table (c693336e, ctx_local_storage.c): put, delete, get. */
extern void (*const rm_ctx_local_storage_table[3])(void);

/* Runs the context-local-storage destructors registered for ctx and forgets its entries; the lead
 * calls it when a context is reset or destroyed. */
void rm_ctx_local_storage_release(CUcontext ctx);

#endif
