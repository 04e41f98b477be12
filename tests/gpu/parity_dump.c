// parity_dump.c: what scripts/hf_parity.py compares against Hugging Face's GPT2LMHeadModel.
// Loads a checkpoint and one batch of tokens, and writes, as raw little-endian fp32:
//   logits (B, T, V) of a forward pass, the mean loss, every parameter's gradient in
//   checkpoint order (num_parameters; wte with its Vp padding rows), and the losses of
//   `steps` AdamW steps on the same batch (lr 1e-4, betas 0.9/0.95, eps 1e-8, no weight
//   decay, clip 1.0).
// usage: parity_dump model.bin tokens.bin B T steps out.bin
// tokens.bin: B*T+1 int32 token ids (inputs are the first B*T, targets the last B*T).
//        parity_dump --layout
// prints the model file's layout as JSON (checkpoint.h: checkpoint_print_layout), from which
// hf_parity.py writes its checkpoint: the header and the tensor order are spelled in C alone.
#include <stdlib.h>
#include <string.h>

#include "../../gpt2.h"

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--layout")) {
        checkpoint_print_layout(stdout);
        return 0;
    }
    if (argc != 7) die("usage: parity_dump model.bin tokens.bin B T steps out.bin");
    if (backend_init() != 0) return 1;
    int B = (int)parse_long("B", argv[3], 1, 1 << 16), T = (int)parse_long("T", argv[4], 1, 1 << 20);
    int steps = (int)parse_long("steps", argv[5], 0, 100000);
    GPT2 model;
    gpt2_load_checkpoint(&model, argv[1]);
    int N = B * T, V = model.config.vocab_size;
    int *tokens = malloc((N + 1) * sizeof(int));
    FILE *f = fopen_or_die(argv[2], "rb");
    fread_or_die(tokens, sizeof(int), N + 1, f, argv[2]);
    fclose(f);

    AtomicFile out;
    atomic_open(&out, argv[6]);
    float *row = malloc(V * sizeof(float));
    gpt2_forward(&model, tokens, NULL, B, T);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            gpt2_logits_at(&model, b, t, row);
            atomic_write(&out, row, V * sizeof(float));
        }
    gpt2_zero_grad(&model);
    gpt2_forward_backward(&model, tokens, tokens + 1, B, T, 1.0f);
    float loss = gpt2_loss_sum(&model);
    atomic_write(&out, &loss, sizeof(float));
    float *grads = malloc(model.num_parameters * sizeof(float));
    floatX_download(grads, model.grads_memory, model.num_parameters);
    atomic_write(&out, grads, model.num_parameters * sizeof(float));
    for (int step = 1; step <= steps; step++) {
        if (step > 1) {
            gpt2_zero_grad(&model);
            gpt2_forward_backward(&model, tokens, tokens + 1, B, T, 1.0f);
            loss = gpt2_loss_sum(&model);
        }
        gpt2_update(&model, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f, step);
        atomic_write(&out, &loss, sizeof(float));
        printf("step %d loss %.6f\n", step, loss);
    }
    atomic_commit(&out);
    free(grads); free(row); free(tokens);
    gpt2_free(&model);
    return 0;
}
