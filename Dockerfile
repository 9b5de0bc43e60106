# leasekeeper API and worker image (one image, two commands; see docker-compose.yml).
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json ./
COPY src ./src
COPY workflows ./workflows
COPY activities ./activities
COPY worker ./worker
COPY dev-stack ./dev-stack
COPY scripts ./scripts
COPY test ./test
COPY web ./web
RUN npm run build && npm prune --omit=dev

FROM node:20-bookworm-slim
WORKDIR /app
ENV NODE_ENV=production
COPY --from=build /app/package.json ./
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
# Migrations are read at start-up; workflows/ marks the checkout root for path resolution.
COPY --from=build /app/src/db/migrations ./src/db/migrations
COPY --from=build /app/workflows ./workflows
USER node
EXPOSE 1234
CMD ["node", "dist/src/api/main.js"]
