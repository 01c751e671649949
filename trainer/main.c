/*  main.c - jizhi-train: the built-in trainer (DESIGN §6).

    Reads flags, opens the trial through libjizhi (standalone outside a
    study), lets the trial's params override the flags, loads the data,
    trains with live control and reports metrics through the helper.
    Exit status: 0 done (or stopped), 1 failure, 2 usage error (bad flag,
    bad param value). Built twice: without CUDA (jizhi-train) and, with
    -DTRN_WITH_CUDA, linked to backend_cuda.cu (jizhi-train-cuda).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/trn.h"

#ifdef TRN_WITH_CUDA
trn_backend *trn_cuda_backend_new(char *err);
void trn_cuda_backend_destroy(trn_backend *b);
#endif

int main(int argc, char **argv)
{
    char err[TRN_ERRLEN];
    trn_config cfg;
    trn_config_defaults(&cfg);
    int rc = trn_config_parse_args(&cfg, argc, argv, stdout, err);
    if (rc == 1)
        return 0;
    if (rc < 0) {
        fprintf(stderr, "jizhi-train: %s\n", err);
        return 2;
    }
    jz_trial *jz = jz_open();
    if (!jz) {
        fprintf(stderr, "jizhi-train: cannot open the trial (see the message above)\n");
        return 1;
    }
    if (trn_config_apply_params(&cfg, trn_jz_param, jz, err) < 0 ||
        trn_config_validate(&cfg, err) < 0) {
        fprintf(stderr, "jizhi-train: %s\n", err);
        jz_close(&jz);
        return 2;
    }
    trn_backend *backend = NULL;
    if (!strcmp(cfg.backend, "cuda")) {
#ifdef TRN_WITH_CUDA
        backend = trn_cuda_backend_new(err);
        if (!backend) {
            fprintf(stderr, "jizhi-train: --backend cuda: %s\n", err);
            jz_close(&jz);
            return 1;
        }
#else
        fprintf(stderr, "jizhi-train: --backend cuda: this binary is built without CUDA "
                        "(build jizhi-train-cuda with `make cuda`)\n");
        jz_close(&jz);
        return 2;
#endif
    }
    trn_cpu_set_threads(cfg.threads);

    trn_dataset train, val, test;
    if (trn_data_load(&cfg, &train, &val, &test, err) < 0) {
        fprintf(stderr, "jizhi-train: %s\n", err);
        jz_close(&jz);
        return 1;
    }
    int status = 1;
    trn_trainer *t = trn_trainer_new(&cfg, &train, &val, &test, err);
    if (!t) {
        fprintf(stderr, "jizhi-train: %s\n", err);
        goto out;
    }
    trn_io io;
    trn_io_jizhi(&io, jz);
    trn_trainer_set_io(t, &io);
    if (backend)
        trn_trainer_set_backend(t, backend);
    /* a trial the controller restarts from a checkpoint (pause --release
       then resume, or a load the program did not acknowledge) gets it in
       JIZHI_LOAD_CHECKPOINT; --resume wins */
    const char *restore = cfg.resume[0] ? cfg.resume : getenv("JIZHI_LOAD_CHECKPOINT");
    if (restore && *restore && trn_trainer_load(t, restore, err) < 0) {
        fprintf(stderr, "jizhi-train: %s: %s\n",
                cfg.resume[0] ? "--resume" : "JIZHI_LOAD_CHECKPOINT", err);
        goto out;
    }
    if (trn_trainer_run(t, err) < 0) {
        fprintf(stderr, "jizhi-train: %s\n", err);
        goto out;
    }
    status = 0;
out:
    trn_trainer_destroy(&t);
#ifdef TRN_WITH_CUDA
    if (backend)
        trn_cuda_backend_destroy(backend);
#endif
    trn_data_free(&train);
    trn_data_free(&val);
    trn_data_free(&test);
    jz_close(&jz);
    return status;
}
